"""What is sent: the built-in and custom traffic mixes (`mixes`) and the seeded request sampler (`sampler`) that
turns a scenario into the same stream of prompts and lengths for every variant.

Stage 2 of a request's path. Pure: imports `loadgen.config` and the standard library only.
"""
