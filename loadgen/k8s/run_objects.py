"""The objects of one `loadgen k8s run`: the Helm chart's own render, with this run's values put in.

``run_objects.yaml`` (package data) is charts/loadgen rendered by real Helm for a headless release
(``RUN_VALUES``), written by ``scripts/gen-k8s-workloads.py``; a test fails when it differs from a fresh render. Its
per-run values were rendered as placeholders, and a run puts its own in, precisely:

- ``name`` (the release, and ``fullnameOverride``) and ``namespace``: every string that holds the placeholder;
- ``workers`` (``workers.replicas``): every value that is the placeholder number, as a number or as a string;
- ``image``: every string that is the chart's rendered image;
- the Secrets the chart generates (their values are blank in the file): a fresh random 32-character value each, as
  ``randAlphaNum 32`` gives a first ``helm install``;
- ``scenario``: the ConfigMap's scenario with its ``report_dir`` replaced by the chart's (``loadgen.scenarioYaml``),
  ``checksum/config`` the SHA-256 of that text;
- ``secrets`` (``apiKeySecrets``): one ``secretKeyRef`` env entry per credential variable a pod reads, first in its
  env, by the chart's rules (``loadgen.secretNames``; scenario_secrets.py), and the chart's refusals with its words.

The chart decides everything else (objects, order, labels, commands, security, policies). A test renders the chart
with ``chart_values(spec)`` and compares it with ``build_objects(spec)``, field by field, for several runs.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import secrets
import string
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

import yaml

from loadgen.k8s.scenario_secrets import credential_header_problem, secret_env_names

__all__ = [
    "PLACEHOLDERS",
    "RUN_VALUES",
    "RunSpec",
    "build_objects",
    "chart_values",
    "done_token",
    "image_ref",
    "master_service",
    "rendered",
]

# The chart values every `loadgen k8s run` sets. The reports come out through the API server's service proxy, whose
# traffic to the master's web port comes from wherever the control plane is (outside the pod network on most
# clusters): admitted from any address. The port serves the run's reports read-only; ending its window takes the
# run's token.
RUN_VALUES: dict[str, Any] = {
    "mode": "headless",
    "networkPolicy": {"webFrom": [{"ipBlock": {"cidr": "0.0.0.0/0"}}, {"ipBlock": {"cidr": "::/0"}}]},
}
# What the per-run values were rendered as (valid where they go: a DNS label, a replica count).
PLACEHOLDERS: dict[str, Any] = {"name": "run-name-placeholder", "namespace": "run-ns-placeholder", "workers": 7919}
_ALNUM = string.ascii_letters + string.digits


@dataclass(frozen=True)
class RunSpec:
    """What one run sets: the release ``name`` (prefix of every object: a DNS label of at most 52 characters), the
    scenario (a mapping, as in its file), worker pods, the image (``REPO[:TAG]`` or ``REPO@DIGEST``; empty: the
    chart's) and ``secrets``, the chart's ``apiKeySecrets`` ({ENV: {name, key}})."""

    name: str
    scenario: dict[str, Any]
    workers: int = 1
    image: str = ""
    secrets: dict[str, dict[str, str]] = field(default_factory=dict)


@cache
def rendered() -> dict[str, Any]:
    """The packaged render: {"placeholders", "chart_image", "objects"}."""
    text = resources.files("loadgen.k8s").joinpath("run_objects.yaml").read_text(encoding="utf-8")
    return dict(yaml.safe_load(text))


def image_ref(text: str, chart_image: str) -> str:
    """The image a run's pods get: ``text`` as given, a bare REPO with the chart's tag (its appVersion, as the
    chart's image with an empty ``image.tag``), or the chart's image when empty. A registry's port is not a tag."""
    if not text:
        return chart_image
    if "@" in text or ":" in text.rpartition("/")[2]:
        return text
    return f"{text}:{chart_image.rpartition(':')[2]}"


def chart_values(spec: RunSpec) -> dict[str, Any]:
    """The chart values with which `helm install <spec.name> charts/loadgen` renders what ``build_objects`` makes."""
    image: dict[str, str] = {}
    if "@" in spec.image:
        repo, _, digest = spec.image.partition("@")
        image = {"repository": repo, "digest": digest}
    elif spec.image:
        repo, _, tag = image_ref(spec.image, ":").rpartition(":")
        image = {"repository": repo, "tag": tag}
    values = copy.deepcopy(RUN_VALUES) | {
        "fullnameOverride": spec.name,
        "workers": {"replicas": spec.workers},
        "scenario": spec.scenario,
        "apiKeySecrets": spec.secrets,
    }
    return values | ({"image": image} if image else {})


def _substitute(node: Any, words: dict[str, str], whole: dict[Any, Any]) -> Any:
    if isinstance(node, dict):
        return {k: _substitute(v, words, whole) for k, v in node.items()}
    if isinstance(node, list):
        return [_substitute(v, words, whole) for v in node]
    if not isinstance(node, bool) and node in whole:
        return whole[node]
    if isinstance(node, str):
        for old, new in words.items():
            node = node.replace(old, new)
    return node


def _credential_env(spec: RunSpec, pod: str) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = []
    for fld, name in secret_env_names({"scenario": spec.scenario}, pod):
        if any(e["name"] == name for e in env):
            continue
        ref = spec.secrets.get(name) or {}
        if not (ref.get("name") and ref.get("key")):
            raise ValueError(
                f"scenario {fld} names environment variable {name}, which has no apiKeySecrets.{name} {{name, key}}"
            )
        env.append({"name": name, "valueFrom": {"secretKeyRef": {"name": ref["name"], "key": ref["key"]}}})
    return env


def _put_scenario(objects: list[dict[str, Any]], scenario: dict[str, Any]) -> str:
    (cm,) = [o for o in objects if o["kind"] == "ConfigMap"]
    ((key, text),) = cm["data"].items()
    report_dir = yaml.safe_load(text)["report_dir"]  # where the chart mounts the reports
    doc = {k: v for k, v in scenario.items() if k != "report_dir"} | {"report_dir": report_dir}
    cm["data"][key] = yaml.safe_dump(doc, sort_keys=True)
    return hashlib.sha256(cm["data"][key].encode()).hexdigest()


def build_objects(spec: RunSpec, namespace: str) -> list[dict[str, Any]]:
    """The run's objects in the order Helm creates them (see the module doc). ValueError: what the chart refuses."""
    problem = credential_header_problem({"scenario": spec.scenario})
    if problem:
        raise ValueError(problem)
    r = rendered()
    ph = r["placeholders"]
    whole = {ph["workers"]: spec.workers, str(ph["workers"]): str(spec.workers)}
    whole[r["chart_image"]] = image_ref(spec.image, r["chart_image"])
    words = {ph["name"]: spec.name, ph["namespace"]: namespace}
    objects: list[dict[str, Any]] = _substitute(r["objects"], words, whole)
    checksum = _put_scenario(objects, spec.scenario)
    for o in objects:
        if o["kind"] == "Secret":
            o["data"] = {k: _random_value() for k in o["data"]}
        template = (o.get("spec") or {}).get("template")
        if not template:
            continue
        notes = template["metadata"].get("annotations") or {}
        if "checksum/config" in notes:
            notes["checksum/config"] = checksum
        pod = "master" if template["metadata"]["labels"]["app.kubernetes.io/component"] == "master" else "workers"
        # The master's init container (`loadgen validate`) reads the master's credentials.
        for c in [*template["spec"].get("initContainers", []), *template["spec"]["containers"]]:
            env = _credential_env(spec, pod) + list(c.get("env") or [])
            if env:
                c["env"] = env
    return objects


def _random_value() -> str:
    return base64.b64encode("".join(secrets.choice(_ALNUM) for _ in range(32)).encode()).decode()


def done_token(objects: list[dict[str, Any]]) -> str | None:
    """The report window's token among built objects (the `<fullname>-done-token` Secret), if any."""
    for o in objects:
        if o["kind"] == "Secret" and o["metadata"]["name"].endswith("-done-token"):
            return base64.b64decode(o["data"]["token"]).decode()
    return None


def master_service(objects: list[dict[str, Any]]) -> str:
    """``<service>:<web port>`` of the master's Service: where the API server's service proxy finds the reports."""
    (svc,) = [o for o in objects if o["kind"] == "Service"]
    (web,) = [p for p in svc["spec"]["ports"] if p["name"] == "web"]
    return f"{svc['metadata']['name']}:{web['port']}"
