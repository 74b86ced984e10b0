"""Which credentials a release's pods read, and which the chart refuses, from the scenario in its values (the chart's
`loadgen.secretNames` and `loadgen.checkHeaders` helpers spell out the same rules in templates)."""

from __future__ import annotations

from typing import Any

from loadgen.config.classes import is_credential_header

__all__ = ["credential_header_problem", "secret_env_names"]


def secret_env_names(v: dict[str, Any], pod: str) -> list[tuple[str, str]]:
    """(field, NAME) of every environment variable a pod reads a credential from (the chart's `loadgen.secretNames`):
    the workers, each variant's api_key_env and headers_from_env (they send the requests); the master, the
    Prometheus credentials and, with `tokenizer: server`, the first variant's (the scenario's check POSTs /tokenize
    from every process that loads it)."""
    sc = v["scenario"]
    variants = sc.get("variants") or []
    out: list[tuple[str, str]] = []
    source = variants
    if pod == "master":
        prom = (sc.get("metrics") or {}).get("prometheus") or {}
        if prom.get("bearer_token_env"):
            out.append(("metrics.prometheus.bearer_token_env", prom["bearer_token_env"]))
        basic = prom.get("basic_auth_env") or {}
        for part in ("username", "password"):
            if basic.get(part):
                out.append((f"metrics.prometheus.basic_auth_env.{part}", basic[part]))
        source = variants[:1] if str(sc.get("tokenizer") or "") == "server" else []
    for i, variant in enumerate(source):
        if variant.get("api_key_env"):
            out.append((f"variants[{i}].api_key_env", variant["api_key_env"]))
        for header, name in sorted((variant.get("headers_from_env") or {}).items()):
            out.append((f"variants[{i}].headers_from_env.{header}", name))
    return out


def credential_header_problem(v: dict[str, Any]) -> str | None:
    """The chart's refusal of a literal credential-like header in the scenario (the ConfigMap would hold it)."""
    sc = v["scenario"]
    where = [(f"variants[{i}]", x.get("headers") or {}) for i, x in enumerate(sc.get("variants") or [])]
    classes = (sc.get("traffic") or {}).get("classes") or []
    where += [(f"traffic.classes[{i}]", c.get("headers") or {}) for i, c in enumerate(classes)]
    for at, headers in where:
        for header in sorted(headers):
            if is_credential_header(header):  # the rule the chart's loadgen.checkHeaders spells out
                return (
                    f"scenario {at}.headers.{header} looks like a credential, and the scenario ConfigMap would hold "
                    "its value: name an environment variable in headers_from_env instead, filled from a Secret by "
                    "apiKeySecrets"
                )
    return None
