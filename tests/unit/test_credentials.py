"""loadgen/config/credentials.py: what looks like a credential (a header name, a body field at any depth), the forms
in which a server may quote one, and redaction."""

from __future__ import annotations

import base64

import pytest

from loadgen.config.credentials import (
    MASK,
    credential_key,
    credential_values,
    is_credential_field,
    is_credential_header,
    quotes_secret,
    redact,
    redact_bytes,
    secret_forms,
)

KEY = "sk-canary-7f3a9c1e5b2d"


@pytest.mark.parametrize(
    ("name", "credential"),
    [("api-key", True), ("x-api-key", True), ("Authorization", True), ("Proxy-Authorization", True),
     ("Ocp-Apim-Subscription-Key", True), ("X-Auth-Token", True), ("Cookie", True), ("Set-Cookie", True),
     ("X-Client-Secret", True), ("X-Route", False), ("Accept-Language", False), ("traceparent", False)],
)  # fmt: skip
def test_credential_headers(name: str, credential: bool) -> None:
    assert is_credential_header(name) is credential


@pytest.mark.parametrize(
    ("name", "credential"),
    [("api_key", True), ("apiKey", True), ("APIKey", True), ("openai-api-key", True), ("accessToken", True),
     ("auth_token", True), ("client_secret", True), ("userPassword", True), ("credentials", True),
     ("max_tokens", False), ("skip_special_tokens", False), ("top_k", False), ("key", False), ("secretary", False),
     ("token_budget", False), ("auth", False)],
)  # fmt: skip
def test_credential_fields(name: str, credential: bool) -> None:
    assert is_credential_field(name) is credential


def test_the_first_credential_key_at_any_depth_with_its_path() -> None:
    body = {"options": {"num_ctx": 8}, "items": [{"x": 1}, {"nested": {"clientSecret": KEY}}], "apiKey": KEY}
    assert credential_key(body) == ("items", 1, "nested", "clientSecret")
    assert credential_key({"max_tokens": 5, "stop": ["key"]}) is None


def test_every_form_a_server_may_quote() -> None:
    assert secret_forms(f"Bearer {KEY}") == [f"Bearer {KEY}", KEY]
    assert secret_forms(f"Token {KEY}") == [f"Token {KEY}", KEY]
    pair = base64.b64encode(b"promuser:prompass").decode()
    assert secret_forms(f"Basic {pair}") == [f"Basic {pair}", pair, "promuser:prompass", "promuser", "prompass"]
    assert secret_forms(KEY) == [KEY] and secret_forms("abc") == []  # too short to redact anything safely
    values = credential_values({"Authorization": f"Bearer {KEY}", "api-key": "hdr-0123456789"})
    assert values == [f"Bearer {KEY}", KEY, "hdr-0123456789"]  # longest first


def test_redaction_in_text_and_bytes() -> None:
    secrets = credential_values({"Authorization": f"Token {KEY}", "x-api-key": "xkey-0123"})
    text = f"bad Authorization: Token {KEY}; token {KEY}; x-api-key xkey-0123"
    assert redact(text, secrets) == f"bad Authorization: {MASK}; token {MASK}; x-api-key {MASK}"
    assert redact_bytes(text.encode(), secrets) == redact(text, secrets).encode()
    assert redact("nothing here", secrets) == "nothing here"


def test_a_text_quoting_part_of_a_secret_is_withheld_but_not_its_scheme() -> None:
    secrets = credential_values({"Authorization": f"Bearer {KEY}"})
    assert quotes_secret(f"key {KEY[:8]}… is wrong", secrets)
    assert not quotes_secret("missing Bearer token", secrets)  # the scheme is no part of the secret
    assert not quotes_secret("invalid key", secrets)
