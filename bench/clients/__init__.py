"""Baseline clients (plain Locust users) the runner measures beside loadgen; configured by BENCH_* env vars."""
