"""What a request's timings become: the raw record and every metric derived from it (`records`), mergeable HDR
histograms (`histogram`), per-(variant, mix) aggregates shipped as deltas (`aggregate`), each worker's own health
(`health`) and the master's collector that merges them (`collector`).

Stage 5 of a request's path. Pure: imports neither gevent nor locust.
"""
