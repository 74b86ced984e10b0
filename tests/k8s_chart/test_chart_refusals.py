"""The chart refuses what `loadgen validate` refuses, on the real Helm library (helm-sdkpy's install against the stub
API server): a scenario that would put a credential in the ConfigMap fails at render time, naming the field and never
quoting the value (a credential-looking `extra_body` key at any depth, a URL with user info or a query, a value where
an environment variable's NAME belongs, a credential-looking header: test_chart_security.py); by loadgen's own rules
(charts/loadgen/templates/_credentials.tpl is generated from loadgen/config/credentials.py), compared here key by key.
Everything else loadgen validate checks, the master's `validate` init container checks before any load
(test_chart_commands.py runs it)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loadgen.config.credentials import is_credential_field, is_credential_header
from loadgen.config.errors import ConfigError
from loadgen.config.scenario import parse_scenario
from tests.k8s_chart.conftest import CHART, ROOT, helm_render

CANARY = "CANARY-9f2e71c0d4ab"
V = {"name": "a", "base_url": "http://vllm-a:8000", "model": "m"}
PROM = {"url": "http://prometheus.monitoring:9090", "queries": {"gpu": "avg(DCGM_FI_DEV_GPU_UTIL)"}}


def _install(tmp_path: Path, scenario: dict[str, Any], **values: Any) -> tuple[int, dict[str, Any], str]:
    return helm_render({"scenario": scenario, **values}, tmp_path)


def _refused_by_loadgen(scenario: dict[str, Any]) -> list[str]:
    """The paths `loadgen validate`'s model refuses in ``scenario`` (empty: accepted)."""
    try:
        parse_scenario(json.dumps(scenario))
    except ConfigError as e:
        return [i.path for i in e.issues]
    return []


def _refusal(err: str) -> str:
    assert CANARY not in err, err
    return err


@pytest.mark.parametrize("mode", ["ui", "headless"])
@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({"api_key": CANARY}, "variants[0].extra_body.api_key"),
        ({"apiKey": CANARY}, "variants[0].extra_body.apiKey"),
        ({"auth": {"accessToken": CANARY}}, "variants[0].extra_body.auth.accessToken"),
        ({"options": {"items": [{"x": 1}, {"client_secret": CANARY}]}},
         "variants[0].extra_body.options.items[1].client_secret"),
        ({"Password": CANARY}, "variants[0].extra_body.Password"),
    ],
)  # fmt: skip
def test_helm_install_refuses_a_credential_in_extra_body_naming_the_field(
    tmp_path: Path, mode: str, body: dict[str, Any], path: str
) -> None:
    scenario = {"variants": [{**V, "extra_body": body}]}
    assert _refused_by_loadgen(scenario) == [path]
    code, _, err = _install(tmp_path, scenario, mode=mode)
    assert code == 1 and f"scenario {path} looks like a credential" in _refusal(err), err


@pytest.mark.parametrize(
    ("scenario", "path", "words"),
    [
        ({"variants": [{**V, "base_url": f"https://user:{CANARY}@vllm-a:8000"}]}, "variants[0].base_url", "user info"),
        ({"variants": [V, {**V, "name": "b", "base_url": f"http://{CANARY}@b:8000"}]},
         "variants[1].base_url", "user info"),
        ({"variants": [{**V, "base_url": f"http://vllm-a:8000/?key={CANARY}"}]}, "variants[0].base_url", "a query"),
        ({"variants": [V], "metrics": {"prometheus": {**PROM, "url": f"http://admin:{CANARY}@prom:9090"}}},
         "metrics.prometheus.url", "user info"),
        ({"variants": [V], "metrics": {"prometheus": {**PROM, "url": f"http://prom:9090/?token={CANARY}"}}},
         "metrics.prometheus.url", "a query"),
        ({"variants": [V], "tracing": {"otlp_endpoint": f"http://otel:{CANARY}@collector:4318"}},
         "tracing.otlp_endpoint", "user info"),
    ],
)  # fmt: skip
def test_helm_install_refuses_credentials_in_a_url_naming_the_field(
    tmp_path: Path, scenario: dict[str, Any], path: str, words: str
) -> None:
    assert _refused_by_loadgen(scenario) == [path]
    code, _, err = _install(tmp_path, scenario)
    assert code == 1 and f"scenario {path} " in _refusal(err) and words in err, err


@pytest.mark.parametrize(
    ("scenario", "path"),
    [
        ({"variants": [{**V, "api_key_env": f"sk-{CANARY}"}]}, "variants[0].api_key_env"),
        ({"variants": [{**V, "headers_from_env": {"api-key": CANARY}}]}, "variants[0].headers_from_env.api-key"),
        ({"variants": [V], "metrics": {"prometheus": {**PROM, "bearer_token_env": CANARY}}},
         "metrics.prometheus.bearer_token_env"),
        ({"variants": [V],
          "metrics": {"prometheus": {**PROM, "basic_auth_env": {"username": "U", "password": CANARY}}}},
         "metrics.prometheus.basic_auth_env.password"),
    ],
)  # fmt: skip
def test_a_value_where_a_variables_name_belongs_is_refused_without_quoting_it(
    tmp_path: Path, scenario: dict[str, Any], path: str
) -> None:
    # Helm's schema check would quote it (a key pasted in the wrong place): the chart's schema leaves the NAME
    # pattern to the templates, whose message names the field only.
    assert _refused_by_loadgen(scenario) == [path]
    code, _, err = _install(tmp_path, scenario)
    assert code == 1 and f"scenario {path}: expected the NAME of an environment variable" in _refusal(err), err


# Names, credential or not: the chart's verdict on each is loadgen's (and both are the generated rules').
FIELDS = [
    "api_key", "apiKey", "APIKey", "api-key", "openai_api_key", "access_token", "accessToken", "authToken",
    "auth_token", "client_secret", "clientSecret", "secret", "password", "userPassword", "credentials", "credential",
    "max_tokens", "max_completion_tokens", "skip_special_tokens", "top_k", "token_budget", "key", "keywords",
    "secretary", "return_num_output_tokens", "logit_bias", "cache_prompt", "tokenizer", "auth", "passwords",
]  # fmt: skip
HEADERS = [
    "api-key", "x-api-key", "Authorization", "X-Auth-Token", "Cookie", "Set-Cookie", "Ocp-Apim-Subscription-Key",
    "X-Client-Secret", "X-Password", "Proxy-Authorization", "X-Credential-Id", "X-Route", "Accept-Language",
    "X-Priority", "X-Request-Tag", "traceparent",
]  # fmt: skip
_VERDICTS = """apiVersion: v1
kind: ConfigMap
metadata:
  name: verdicts
data:
{{- range .Values.fields }}
  field.{{ . }}: {{ include "loadgen.isCredentialField" . | quote }}
{{- end }}
{{- range .Values.headers }}
  header.{{ . }}: {{ include "loadgen.isCredentialHeader" . | quote }}
{{- end }}
"""


def _chart_verdicts(tmp_path: Path) -> dict[str, bool]:
    """The chart's own helpers (its _credentials.tpl and _checks.tpl, as they are) asked about every name, in one
    install of a chart that holds only them and a ConfigMap of their answers."""
    chart = tmp_path / "verdicts"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: verdicts\nversion: 0.1.0\n", encoding="utf-8")
    for name in ("_credentials.tpl", "_checks.tpl"):
        shutil.copy(CHART / "templates" / name, chart / "templates" / name)
    (chart / "templates" / "verdicts.yaml").write_text(_VERDICTS, encoding="utf-8")
    values, out = tmp_path / "values.yaml", tmp_path / "out.json"
    values.write_text(json.dumps({"fields": FIELDS, "headers": HEADERS}), encoding="utf-8")
    r = subprocess.run(
        [sys.executable, "-m", "tests.k8s_chart.render", str(chart), str(values), str(out)],
        cwd=ROOT, env={**os.environ, "HELM_DRIVER": "memory"}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    (cm,) = json.loads(out.read_text(encoding="utf-8"))["created"]
    return {k: v == "true" for k, v in cm["data"].items()}


def test_the_chart_and_loadgen_agree_on_every_name(tmp_path: Path) -> None:
    verdicts = _chart_verdicts(tmp_path)
    assert verdicts == {f"field.{n}": is_credential_field(n) for n in FIELDS} | {
        f"header.{h}": is_credential_header(h) for h in HEADERS
    }
    refused = {k.split(".", 1)[1] for k, v in verdicts.items() if v and k.startswith("field.")}
    assert refused == {
        "api_key", "apiKey", "APIKey", "api-key", "openai_api_key", "access_token", "accessToken", "authToken",
        "auth_token", "client_secret", "clientSecret", "secret", "password", "userPassword", "credentials",
        "credential",
    }  # fmt: skip
    assert not verdicts["header.X-Route"] and verdicts["header.Set-Cookie"]


@pytest.mark.parametrize("mode", ["ui", "headless"])
def test_a_clean_scenario_renders_and_the_master_validates_it_first(
    tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = {"max_tokens": 5, "skip_special_tokens": True, "options": {"num_ctx": 8192}}
    scenario = {
        "variants": [{**V, "extra_body": body, "api_key_env": "VLLM_KEY"}],
        "metrics": {"prometheus": {**PROM, "bearer_token_env": "PROM_TOKEN"}},
        "tracing": {"otlp_endpoint": "http://collector:4318"},
    }
    refs = {n: {"name": "keys", "key": n.lower()} for n in ("VLLM_KEY", "PROM_TOKEN")}
    for name in refs:
        monkeypatch.setenv(name, CANARY)  # in the environment of whoever renders: never in a manifest
    code, doc, err = _install(tmp_path, scenario, mode=mode, apiKeySecrets=refs)
    assert code == 0, err
    assert CANARY not in json.dumps(doc)
    (cm,) = [o for o in doc["created"] if o["kind"] == "ConfigMap"]
    assert "num_ctx: 8192" in cm["data"]["scenario.yaml"]
    (master,) = [o for o in doc["created"] if o["metadata"]["name"] == "rel-loadgen-master" and "template" in o["spec"]]
    pod = master["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    assert init["command"] == ["loadgen", "validate", "/etc/loadgen/scenario.yaml"]
    assert init["securityContext"] == pod["containers"][0]["securityContext"]
    assert [e["name"] for e in init["env"]] == ["PROM_TOKEN"]  # the master's credentials, not its own tokens
