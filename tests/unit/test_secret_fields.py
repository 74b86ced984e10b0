"""Where a scenario's secrets may come from: credential-like literal headers and body fields are refused (naming the
field, never echoing the value), header values and Prometheus credentials come from named environment variables."""

from __future__ import annotations

import base64

import pytest

from loadgen.config.live_metrics import ClusterPrometheus
from loadgen.config.scenario import missing_secrets, parse_scenario
from loadgen.live.cluster_metrics import _headers, _redacted

from .test_config import MINIMAL, issues_of, one_issue

CANARY = "SECRET-abc123canary"


@pytest.mark.parametrize(
    "header", ["api-key", "x-api-key", "Ocp-Apim-Subscription-Key", "X-Auth-Token", "Cookie", "x-client-secret"]
)
def test_a_literal_credential_header_is_refused_naming_it_without_its_value(header: str) -> None:
    issue = one_issue(MINIMAL + f"    headers:\n      {header}: {CANARY}\n")
    assert (issue.path, issue.line) == (f"variants[0].headers.{header}", 6)
    assert "headers_from_env" in issue.message and CANARY not in issue.message


def test_ordinary_headers_still_pass() -> None:
    sc = parse_scenario(MINIMAL + "    headers:\n      X-Route: canary\n      X-Priority: high\n")
    assert sc.variants[0].headers == {"X-Route": "canary", "X-Priority": "high"}


def test_a_class_header_that_is_a_credential_is_refused_too() -> None:
    text = MINIMAL + f"traffic:\n  classes:\n    - name: paid\n      headers: {{x-api-key: {CANARY}}}\n"
    issue = one_issue(text)
    assert issue.path == "traffic.classes[0].headers.x-api-key" and CANARY not in issue.message


def test_headers_from_env_send_the_variables_values() -> None:
    sc = parse_scenario(MINIMAL + "    api_key_env: LG_KEY\n    headers_from_env:\n      api-key: LG_AZURE\n")
    v = sc.variants[0]
    env = {"LG_KEY": "k1", "LG_AZURE": "k2"}
    assert v.credential_headers(env) == {"Authorization": "Bearer k1", "api-key": "k2"}
    assert v.secret_env_names() == ["LG_KEY", "LG_AZURE"]
    # The report's copy of the scenario holds the names only.
    assert sc.model_dump(mode="json")["variants"][0]["headers_from_env"] == {"api-key": "LG_AZURE"}
    issues = missing_secrets(sc, {"LG_KEY": "k1", "LG_AZURE": " "})
    assert [(i.path, "LG_AZURE is empty" in i.message) for i in issues] == [
        ("variants[0].headers_from_env.api-key", True)
    ]


@pytest.mark.parametrize(
    ("extra", "path", "words"),
    [
        (f"    headers_from_env:\n      api-key: {CANARY}\n", "variants[0].headers_from_env.api-key", "NAME"),
        ("    headers_from_env:\n      x-request-id: V\n", "variants[0].headers_from_env.x-request-id", "itself"),
        (
            "    headers: {X-A: v}\n    headers_from_env: {x-a: V}\n",
            "variants[0].headers_from_env.x-a",
            "one place",
        ),
        (
            "    api_key_env: K\n    headers_from_env: {Authorization: V}\n",
            "variants[0].headers_from_env.Authorization",
            "api_key_env sends",
        ),
        (f"    extra_body: {{api_key: {CANARY}}}\n", "variants[0].extra_body.api_key", "credential"),
        (
            f"    extra_body: {{auth: {{accessToken: {CANARY}}}}}\n",
            "variants[0].extra_body.auth.accessToken",
            "credential",
        ),
    ],
)
def test_each_secret_mistake_names_its_field(extra: str, path: str, words: str) -> None:
    issue = one_issue(MINIMAL + extra)
    assert issue.path == path and words in issue.message and CANARY not in issue.message, issue


def test_ordinary_body_fields_with_token_in_their_name_pass() -> None:
    body = "{max_tokens: 5, skip_special_tokens: true, return_num_output_tokens: true, top_k: 3}"
    sc = parse_scenario(MINIMAL + f"    extra_body: {body}\n")
    assert sc.variants[0].extra_body["top_k"] == 3


def _prom(extra: str) -> str:
    return MINIMAL + f"metrics:\n  prometheus:\n    url: {extra}\n    queries: {{a: up}}\n"


def test_a_prometheus_url_with_credentials_is_refused_without_echoing_them() -> None:
    issue = one_issue(_prom(f"http://admin:{CANARY}@prom:9090"))
    assert issue.path == "metrics.prometheus.url" and "basic_auth_env" in issue.message
    assert CANARY not in issue.message
    assert "query" in one_issue(_prom(f"http://prom:9090/?token={CANARY}")).message


def test_prometheus_basic_auth_comes_from_the_environment_and_errors_are_redacted() -> None:
    sc = parse_scenario(_prom("http://prom:9090") + "    basic_auth_env: {username: LG_U, password: LG_P}\n")
    cfg = sc.metrics.prometheus
    assert isinstance(cfg, ClusterPrometheus)
    env = {"LG_U": "admin", "LG_P": CANARY}
    auth = _headers(cfg, env)["Authorization"]
    assert auth == "Basic " + base64.b64encode(f"admin:{CANARY}".encode()).decode()
    echoed = f"bad auth {auth} for admin with {CANARY}"
    assert CANARY not in _redacted(cfg, env, echoed) and auth.split()[1] not in _redacted(cfg, env, echoed)
    both = _prom("http://prom:9090") + "    bearer_token_env: T\n    basic_auth_env: {username: U, password: P}\n"
    assert "not both" in one_issue(both).message
    bad = issues_of(_prom("http://prom:9090") + f"    basic_auth_env: {{username: U, password: '{CANARY}'}}\n")
    assert [i.path for i in bad] == ["metrics.prometheus.basic_auth_env.password"]
    assert CANARY not in bad[0].message
