"""What is sent and when: the built-in and custom traffic mixes (`mixes`), the seeded request sampler (`sampler`)
that gives every variant the same stream of prompts and lengths, tokenizer-exact prompts (`tokenizer`,
`gguf_tokenizer`, `words`), dataset replay (`datasets`), multi-turn sessions (`sessions`), open-loop arrival
schedules (`arrivals`) and the rate steps of sweeps (`sweeps`).

Stage 2 of a request's path. Pure: the standard library, orjson, `loadgen.config` and `loadgen.registry`; the
`tokenizers` / `gguf` / `jinja2` packages only when a scenario names a tokenizer (imported then, not before).
"""
