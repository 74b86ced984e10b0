"""Bytes → chunks → record, for every server family: HTTP chunked de-framing (`chunked`), SSE (`sse`), NDJSON
(`ndjson`), the per-server payload readers (`dialects/`), the stream accumulator that turns timestamped reads into a
`RequestRecord` (`accumulator`), and the optional C half of the common read (`_wire.c`, imported only by `native`).

Stage 3 of a request's path. Pure: no socket, no gevent, no Locust; imports `loadgen.measure.records`.
"""
