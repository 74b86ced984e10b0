"""`loadgen init URL`: ask the server at URL what it is (`loadgen.protocol.probe`), pick the dialect and the model,
and write a commented starter scenario that `loadgen validate` accepts and `loadgen run` can run as it is.

The starter is small on purpose: one variant, the built-in chat mix (its lengths capped to the server's context
when that is shorter than the mix's longest request), a few users for a minute, and the success rate as its only
active objective — a first run measures; the latency bounds are the user's to set, written out commented. Beside it
goes `scenario.schema.json`, which the first line points editors at.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from importlib.resources import files
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from loadgen.cli.schema import SCHEMA_FILES
from loadgen.config.builtin_mixes import BUILTIN_TABLE
from loadgen.config.credentials import credential_values, redact
from loadgen.config.durations import parse_duration
from loadgen.config.errors import ConfigError
from loadgen.config.scenario import parse_scenario
from loadgen.config.types import NAME_PATTERN
from loadgen.exit_codes import ExitCode
from loadgen.protocol.dialects import DIALECT_NAMES
from loadgen.protocol.probe import PROBE_TIMEOUT_S, ProbeError, ServerInfo, probe_server

__all__ = ["add_init_parser", "cmd_init", "fitted_chat", "normalize_url", "starter_scenario"]

SCHEMA_NAME = "scenario.schema.json"
# Prompt lengths are words, about one token each, and a chat template adds its own: a request is sized to this
# share of the context at most.
_CONTEXT_SHARE = 0.8


def add_init_parser(sub: Any) -> None:
    i = sub.add_parser(
        "init",
        help="ask the server at URL what it is and write a starter scenario for it",
        description="Probe URL (/v1/models, /version, /props, /info, /api/tags: a few GETs of a few seconds each), "
        "pick the dialect and the model, and write a commented starter scenario.",
        epilog="example: loadgen init http://127.0.0.1:8000 && loadgen run scenario.yaml",
    )
    i.add_argument("url", help="the server's root, e.g. http://127.0.0.1:8000 (a trailing /v1 is dropped)")
    i.add_argument("--out", default="scenario.yaml", help="the scenario file to write (default scenario.yaml)")
    i.add_argument("--model", default=None, help="the model to load-test, when the server serves several")
    i.add_argument(
        "--api-key-env",
        default=None,
        metavar="NAME",
        help="environment variable holding the API key: sent while probing, and named (never copied) in the scenario",
    )
    i.add_argument(
        "--dialect", default=None, choices=DIALECT_NAMES, help="speak this dialect instead of the one picked"
    )
    i.add_argument(
        "--name", type=_variant_name, default=None, help="the variant's name in reports (default: the server family)"
    )
    i.add_argument("--users", type=_positive_int, default=4, help="load.users of the starter (default 4)")
    i.add_argument("--duration", type=_duration, default="60s", help="load.duration of the starter (default 60s)")
    i.add_argument(
        "--timeout",
        type=_positive_float,
        default=PROBE_TIMEOUT_S,
        help=f"seconds per probe (default {PROBE_TIMEOUT_S:g})",
    )
    i.add_argument("--force", action="store_true", help="overwrite --out (and the schema beside it) if they exist")


def _positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return n


_ENDPOINT_TAILS = ("/v1/chat/completions", "/v1/completions", "/v1/models", "/v1")


def _variant_name(text: str) -> str:
    if not re.fullmatch(NAME_PATTERN, text):
        raise argparse.ArgumentTypeError(
            f"{text!r}: 1-63 letters, digits, '_', '.', '-', starting with one of the first two"
        )
    return text


def _duration(text: str) -> str:
    try:
        ok = parse_duration(text) > 0
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if not ok:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text!r}")
    return text


def _positive_float(text: str) -> float:
    try:
        x = float(text)
    except ValueError:
        x = 0.0
    if not x > 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
    return x


def normalize_url(text: str) -> str:
    """`host:port` → `http://host:port`; no trailing slash, no `/v1` nor a pasted endpoint path after it (the
    dialect adds its own path)."""
    url = text.strip()
    if "://" not in url:
        url = "http://" + url
    url = url.rstrip("/")
    for tail in _ENDPOINT_TAILS:  # a pasted endpoint: its server's root
        if url.endswith(tail):
            url = url[: -len(tail)]
            break
    parts = urlsplit(url)
    if "@" in parts.netloc:
        # Not echoed: it holds a password. (The scenario's base_url refuses it too.)
        raise ValueError("credentials don't belong in the URL: --api-key-env NAME, the variable holding the key")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{text!r} is not an http:// or https:// URL")
    return url


def fitted_chat(context_tokens: int | None) -> dict[str, Any] | None:
    """The built-in chat mix as a custom mix whose requests fit `context_tokens`, or None when chat fits as it is."""
    name, _, system, buckets, (out_lo, out_hi), prompts, _, _ = BUILTIN_TABLE[0]
    assert name == "chat"
    longest = max(hi for _, _, hi, _ in buckets)
    budget = int(context_tokens * _CONTEXT_SHARE) if context_tokens else None
    if budget is None or longest + out_hi <= budget:
        return None
    out_max = min(out_hi, budget // 4)
    prompt_max = budget - out_max
    if prompt_max <= system + 16:
        raise ValueError(f"the server's context ({context_tokens} tokens) is too short for a starter's chat requests")
    fitted = [
        {"name": b, "prompt_tokens": [lo, min(hi, prompt_max)], "weight": w}
        for b, lo, hi, w in buckets
        if lo < prompt_max
    ]
    return {
        "description": f"The built-in chat mix with every request capped to fit a {context_tokens}-token context.",
        "system_prompt_tokens": system,
        "system_prompts": prompts,
        "buckets": fitted,
        "output_tokens": [min(out_lo, out_max), out_max],
    }


_YAML12_NUMBER = re.compile(
    r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?|0x[0-9a-fA-F]+|0o[0-7]+|[-+]?\.inf|\.nan"
)


def _q(value: str) -> str:
    """A YAML scalar that reads back as this very string: plain when YAML would read it so (a URL, `60s`, a model
    id like `llama3.2:latest`), else double-quoted (`true`, `1e3`, a value holding ': ' or ' #'). Flow-safe too:
    a value with `,[]{}` is quoted."""
    if _YAML12_NUMBER.fullmatch(value):  # YAML 1.1 (PyYAML) reads 1e3 as a string, 1.2 (editors) as a number
        return json.dumps(value)
    try:
        plain = value.strip() == value and not set(value) & set(",[]{}#&*!|>'\"%@`") and yaml.safe_load(value) == value
    except yaml.YAMLError:
        plain = False
    return value if plain else json.dumps(value)


def _flow(value: Any) -> str:
    """A flow-style YAML value, as the examples write them: `{name: short, prompt_tokens: [50, 200]}`."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    return _q(value) if isinstance(value, str) else json.dumps(value)


def starter_scenario(
    info: ServerInfo,
    model: str,
    dialect: str,
    api_key_env: str | None,
    name: str | None = None,
    users: int = 4,
    duration: str = "60s",
    file_name: str = "scenario.yaml",
) -> str:
    """The starter's YAML text, comments included."""
    fam = info.family
    about = fam.title + (f" {info.version}" if info.version else "")
    ctx = f", context {info.context_tokens} tokens" if info.context_tokens else ""
    variant = name or fam.key
    lines = [
        f"# yaml-language-server: $schema={SCHEMA_NAME}",
        f"# Starter scenario from `loadgen init {info.base_url}`:",
        f"# {about} serving {model}{ctx}.",
        f"# Check it: `loadgen validate {file_name}`; run it: `loadgen run {file_name}` (exit 0: every SLO met).",
        f"# Every field is explained in {SCHEMA_NAME} (your editor completes and checks with it) and in the docs'",
        "# scenario reference. Only `variants` is required; what is left out takes its default.",
        "name: starter",
        "# Same seed, same requests: runs and variants compare request by request.",
        "seed: 0",
        "",
        "variants:",
        f"  - name: {_q(variant)}",
        f"    base_url: {_q(info.base_url)}",
        f"    model: {_q(model)}",
        f"    # Picked for {fam.title}. It also speaks: {fam.also}."
        if dialect == fam.dialect
        else f"    # Given with --dialect ({fam.title} found; loadgen would pick {fam.dialect}).",
        f"    dialect: {dialect}",
    ]
    if api_key_env:
        lines += [
            "    # The API key is read from this environment variable when the run starts; it never goes in this file.",
            f"    api_key_env: {api_key_env}",
        ]
    if fam.continuous_usage and dialect.startswith("openai-"):
        lines += [
            "    # The server puts cumulative token counts in every chunk: exact per-token ITL.",
            "    continuous_usage_stats: true",
        ]
    if fam.extra_body and dialect.startswith("openai-"):
        lines += [
            "    # Merged into every request body. timings_per_token: llama.cpp's token count in every chunk (exact",
            "    # per-token ITL).",
            f"    extra_body: {_flow(dict(fam.extra_body))}",
        ]
    if fam.key == "ollama":
        lines += [
            "    # Ollama cuts prompts longer than its context (num_ctx: 2048 or 4096 tokens by default, per model);",
            "    # for the chat mix's longest prompts (4000 tokens) raise it:",
            "    # extra_body: {options: {num_ctx: 8192}}",
        ]
    lines += [
        "  # Next: compare deployments. Add a variant (another server, or this one with other settings): every",
        "  # variant gets the same seeded requests and the report pairs them (speedup with confidence intervals).",
        "  # - name: candidate",
        f"  #   base_url: {info.base_url}",
        f"  #   model: {_q(model)}",
        f"  #   dialect: {dialect}",
        "",
        "traffic:",
    ]
    fitted = fitted_chat(info.context_tokens)
    if fitted is None:
        lines += [
            "  # Built-in mixes: chat (prompts of 50-4000 tokens, answers of 50-500), rag (long retrieved contexts,",
            "  # shared prefixes), code (long answers). Weights are relative, e.g.",
            "  # [{name: chat, weight: 0.7}, {name: rag, weight: 0.3}]; custom mixes and dataset replay: see the docs.",
            "  mixes:",
            "    - {name: chat, weight: 1}",
        ]
    else:
        lines += [
            f"  # The built-in chat mix asks up to 4000 prompt + 500 output tokens; this server's context is "
            f"{info.context_tokens},",
            "  # so chat-fit is chat with its lengths capped to fit. Other mixes: rag, code (built in), custom mixes,",
            "  # dataset replay: see the docs.",
            "  mixes:",
            "    - {name: chat-fit, weight: 1}",
            "  custom_mixes:",
            "    chat-fit:",
            f"      description: {_q(fitted['description'])}",
            f"      system_prompt_tokens: {fitted['system_prompt_tokens']}",
            f"      system_prompts: {fitted['system_prompts']}",
            "      buckets:",
            *(f"        - {_flow(b)}" for b in fitted["buckets"]),
            f"      output_tokens: {_flow(fitted['output_tokens'])}",
        ]
    lines += [
        "",
        "load:",
        "  # Concurrent users, closed loop: each sends its next request when its last one ends. Next: raise it",
        "  # step by step, or let `loadgen sweep` find the highest load that still meets the SLOs; load.arrival",
        "  # sends at a fixed rate instead (open loop).",
        f"  users: {users}",
        f"  spawn_rate: {users}",
        f"  duration: {_flow(duration)}",
        "  # Leading part of the run left out of the results (e.g. 10s); cold requests are reported apart anyway.",
        "  warmup: 0s",
        "",
        "# Objectives, checked after the run: a breach exits 1 (a CI gate). A first run measures, so only the success",
        "# rate is checked here; set the latency bounds your users need and uncomment them. (With `slos` left out",
        "# the defaults apply: TTFT p99 <= 3 s, E2E p99 <= 10 s, success rate >= 99 %.)",
        "slos:",
        "  - {metric: success_rate, min_percent: 99}",
        "  # - {metric: ttft, stat: p99, max_ms: 3000}",
        "  # - {metric: e2e, stat: p99, max_ms: 10000}",
        "  # - {metric: itl, stat: p90, max_ms: 50}",
        "",
        "# report.json, report.md and report.html go here.",
        "report_dir: loadgen-report",
    ]
    return "\n".join(lines) + "\n"


def _pick_model(info: ServerInfo, wanted: str | None) -> str:
    if wanted is not None:
        if info.models and wanted not in info.models:
            raise ProbeError(
                f"{info.base_url}: --model {wanted!r} is not among the models it serves: {', '.join(info.models)}"
            )
        return wanted
    if len(info.models) == 1:
        return info.models[0]
    if not info.models:
        raise ProbeError(f"{info.base_url}: {info.family.title} lists no model; name one with --model")
    listed = "\n".join(f"  {m}" for m in info.models)
    raise ProbeError(
        f"{info.base_url}: {info.family.title} serves {len(info.models)} models; pick one with --model:\n{listed}"
    )


def _write_schema(directory: Path, force: bool) -> str:
    text = files("loadgen").joinpath(SCHEMA_FILES["scenario"]).read_text(encoding="utf-8")
    path = directory / SCHEMA_NAME
    if path.exists() and not force and path.read_text(encoding="utf-8") != text:
        return f"kept {path} (it differs from this loadgen's schema: --force, or `loadgen schema --out {path}`)"
    path.write_text(text, encoding="utf-8")
    return f"schema: {path}"


def cmd_init(args: argparse.Namespace) -> int:
    try:
        url = normalize_url(args.url)
    except ValueError as e:
        print(f"loadgen init: {e}", file=sys.stderr)
        return ExitCode.USAGE
    out = Path(args.out)
    if out.exists() and not args.force:
        print(f"loadgen init: {out} exists; --force to overwrite it (or --out another file)", file=sys.stderr)
        return ExitCode.USAGE
    key = None
    if args.api_key_env:
        key = os.environ.get(args.api_key_env, "").strip()
        if not key:
            print(f"loadgen init: --api-key-env: environment variable {args.api_key_env} is not set", file=sys.stderr)
            return ExitCode.USAGE
    # A server may quote the key it got anywhere (its version, a model's name): never in what init says or writes.
    secrets = credential_values([key] if key else [])
    try:
        info = probe_server(url, key, args.timeout)
        model = _pick_model(info, args.model)
        dialect = args.dialect or info.family.dialect
        text = starter_scenario(info, model, dialect, args.api_key_env, args.name, args.users, args.duration, out.name)
        text = redact(text, secrets)
        parse_scenario(text, str(out))  # what is written must validate: a failure here is loadgen's own bug
    except (ProbeError, ValueError, ConfigError) as e:
        print(redact(f"loadgen init: {e}", secrets), file=sys.stderr)
        return ExitCode.USAGE
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
        schema_note = _write_schema(out.parent, args.force)
    except OSError as e:
        print(f"loadgen init: {out}: {e.strerror or e}", file=sys.stderr)
        return ExitCode.USAGE
    ctx = f", context {info.context_tokens} tokens" if info.context_tokens else ""
    found = f"found {info.family.title}{' ' + info.version if info.version else ''} at {url}: model {model}{ctx}"
    print(redact(found, secrets))
    print(f"  asked: {'; '.join(info.tried)}")
    print(f"wrote {out} (dialect {dialect}); {schema_note}")
    print(f"next: loadgen validate {out} && loadgen run {out}")
    return ExitCode.OK
