"""Benchmarks of loadgen itself: fidelity against a ground-truth server, capacity, scale-out, memory, peers.

Run `python bench/run.py --help`; see bench/README.md. Nothing here is imported by the `loadgen` package.
"""
