"""gevent I/O without Locust: the keep-alive streaming connection (`connection`), dialing with its DNS cache and TLS
(`dial`), and the reactor that reads every socket of a worker with kernel receive stamps (`reactor`).

Stage 4 of a request's path. With `loadgen.locust_plugin`, the only package that may import gevent; never locust.
"""
