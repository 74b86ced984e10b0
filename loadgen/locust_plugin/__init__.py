"""The Locust glue, and the only package that imports locust: the plugin's events and CLI flags (`plugin`), the
per-process state of a run (`runtime`), the streaming user (`user`) and what one user needs per request
(`request_stream`), the packaged locustfile (`locustfile`), and the launcher of headless master/worker processes
(`launcher`, which starts Locust in child processes and imports neither locust nor gevent itself).

Importing this package imports nothing: `loadgen.locust_plugin.plugin` and `.user` import locust (which
monkey-patches the process); `launcher` is safe for the CLI.
"""
