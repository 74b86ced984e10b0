"""What a credential looks like in a scenario, and how a credential's value is kept out of every output: one place
for both.

A scenario names its credentials and never holds one, since its values are copied into reports, raw shards and the
chart's ConfigMap: a header whose name holds one of `CREDENTIAL_HEADER_PARTS` takes its value from the environment
(`headers_from_env`), a body field whose name matches `CREDENTIAL_FIELD` is refused in `extra_body`, and a URL
carries no user info (nor a query, where a token may ride). The Helm chart refuses the same at render time with the
same lists: charts/loadgen/templates/_credentials.tpl is generated from this module by scripts/gen-chart-docs.py
(`chart_template`), and a test fails when it is stale.

At run time the values come from the environment, and every text a server sends back (an error body, a
Prometheus's error, a probe's answer) goes through `redact` before it reaches a record, a report or a log: servers
echo the credentials they were sent ("Incorrect API key provided: sk-…").
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "CREDENTIAL_FIELD",
    "CREDENTIAL_HEADER_PARTS",
    "ENV_NAME",
    "MASK",
    "chart_template",
    "credential_key",
    "credential_values",
    "is_credential_field",
    "is_credential_header",
    "quotes_secret",
    "redact",
    "redact_bytes",
    "secret_forms",
]

# Parts of a header name that mark a credential (api-key, x-api-key, X-Auth-Token, Ocp-Apim-Subscription-Key, ...).
CREDENTIAL_HEADER_PARTS = ("key", "token", "secret", "password", "credential", "authorization", "cookie")
# A body field holding a credential, matched against its snake_case name: api_key, apiKey, access_token, authToken,
# client_secret, password, credentials... (not max_tokens, skip_special_tokens, top_k).
CREDENTIAL_FIELD = r"(?:^|[_-])(?:api[_-]?key|access[_-]?token|auth[_-]?token|secret|password|credentials?)$"
# The NAME of the environment variable a credential comes from (`api_key_env`, `headers_from_env` values, ...).
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
# camelCase → snake_case before CREDENTIAL_FIELD: a lower-case letter or digit followed by a capital.
_CAMEL = r"([a-z0-9])([A-Z])"
_FIELD = re.compile(CREDENTIAL_FIELD)
# What replaces a credential in a text; values shorter than this are not redacted (they would blank ordinary words,
# and no real credential is that short).
MASK = "***"
_MIN_SECRET = 4
# A run of this many characters of a credential in a row: enough to say a text quotes part of one.
_QUOTE_RUN = 6


def is_credential_header(name: str) -> bool:
    """Whether a header of this name carries a credential (`api-key`, `X-Auth-Token`, `Cookie`, `Authorization`…):
    its value may come from the environment only."""
    low = name.lower()
    return any(part in low for part in CREDENTIAL_HEADER_PARTS)


def is_credential_field(name: str) -> bool:
    """Whether a JSON body field of this name holds a credential (`api_key`, `apiKey`, `client_secret`, ...)."""
    return _FIELD.search(re.sub(_CAMEL, r"\1_\2", name).lower()) is not None


def credential_key(value: Any, path: tuple[str | int, ...] = ()) -> tuple[str | int, ...] | None:
    """The path of the first key in a JSON value (mappings and lists, any depth) that names a credential, or None."""
    if isinstance(value, dict):
        for key, inner in value.items():
            if is_credential_field(str(key)):
                return (*path, key)
            found = credential_key(inner, (*path, key))
            if found is not None:
                return found
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            found = credential_key(inner, (*path, i))
            if found is not None:
                return found
    return None


def secret_forms(value: str) -> list[str]:
    """The forms in which a server may quote a credential header's value: whole, its credentials without the scheme
    (`Bearer X`, `Token X`: X), and a basic pair decoded (`user:pass`, each part)."""
    value = value.strip()
    forms = [value]
    scheme, _, rest = value.partition(" ")
    rest = rest.strip()
    if rest:
        forms.append(rest)
        if scheme.lower() == "basic":
            try:
                pair = base64.b64decode(rest, validate=True).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError):
                pair = ""
            if pair:
                forms.append(pair)
                forms += pair.split(":", 1)
    return [f for f in forms if len(f) >= _MIN_SECRET]


def credential_values(headers: Mapping[str, str] | Iterable[str]) -> list[str]:
    """The secret values credential headers carry (or the values given), in every form of `secret_forms`, longest
    first: redacting them in turn never leaves part of a longer one, and a text quoting a header whole quotes its
    value too."""
    values = headers.values() if isinstance(headers, Mapping) else headers
    return sorted({f for v in values for f in secret_forms(v)}, key=lambda s: (-len(s), s))


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every secret of ``secrets`` (`credential_values`, longest first) replaced by `MASK`."""
    for secret in secrets:
        if len(secret) >= _MIN_SECRET:
            text = text.replace(secret, MASK)
    return text


def redact_bytes(data: bytes, secrets: Iterable[str]) -> bytes:
    """`redact` for bytes (a reply's first bytes, kept for the post-mortem)."""
    for secret in secrets:
        if len(secret) >= _MIN_SECRET:
            data = data.replace(secret.encode(), MASK.encode())
    return data


def quotes_secret(text: str, secrets: Iterable[str]) -> bool:
    """Whether ``text`` quotes a secret, or 6 characters of one in a row (servers echo keys in part): a text to
    withhold whole rather than redact. A secret's scheme (`Bearer …`) is no part of it: only its last word counts."""
    for s in (secret.rpartition(" ")[2] for secret in secrets):
        if len(s) < _QUOTE_RUN:
            if s and s in text:
                return True
        elif any(s[i : i + _QUOTE_RUN] in text for i in range(len(s) - _QUOTE_RUN + 1)):
            return True
    return False


def chart_template() -> str:
    """charts/loadgen/templates/_credentials.tpl: this module's lists as the chart's templates read them."""
    parts = " ".join(f'"{p}"' for p in CREDENTIAL_HEADER_PARTS)
    return (
        "{{/* Generated by scripts/gen-chart-docs.py from loadgen/config/credentials.py; do not edit. What looks like\n"
        "a credential, by loadgen's own rules: a header name holding one of these parts, a body field whose\n"
        "snake_case name matches the pattern (camelCase turned into snake_case by the second); and what the NAME\n"
        "of the environment variable a credential comes from looks like. */}}\n"
        '{{- define "loadgen.credentialHeaderParts" -}}\n'
        f"{{{{- toJson (list {parts}) -}}}}\n"
        "{{- end -}}\n\n"
        '{{- define "loadgen.credentialFieldPattern" -}}\n'
        f"{CREDENTIAL_FIELD}\n"
        "{{- end -}}\n\n"
        '{{- define "loadgen.camelCasePattern" -}}\n'
        f"{_CAMEL}\n"
        "{{- end -}}\n\n"
        '{{- define "loadgen.envNamePattern" -}}\n'
        f"{ENV_NAME}\n"
        "{{- end -}}\n"
    )
