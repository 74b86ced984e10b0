"""Render the chart with the real Helm library (helm-sdkpy's Install, wait=False) against the stub API server.

Run as a subprocess: HELM_DRIVER=memory must be set before Helm's Go runtime starts, so never in the test process.

    HELM_DRIVER=memory python -m tests.k8s_chart.render CHART VALUES.yaml OUT.json [RELEASE [EXISTING.json [NAMESPACE]]]

EXISTING.json: objects the cluster already holds, by API path (StubAPIServer's ``existing``); `-` for none.
NAMESPACE: the release's namespace (default loadtest).

OUT.json: {"created": [objects POSTed, in order], "manifest": "...", "hooks": ["..."], "notes": "NOTES.txt",
"requests": [[verb, path]]}.
Exit 1 with Helm's error on stderr when the install fails (a schema violation, a `fail` in a template).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from tests.k8s_chart.stub_apiserver import StubAPIServer


def _kubeconfig(url: str, directory: Path, namespace: str) -> Path:
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "stub", "cluster": {"server": url}}],
        "users": [{"name": "stub", "user": {"token": "stub"}}],
        "contexts": [{"name": "stub", "context": {"cluster": "stub", "user": "stub", "namespace": namespace}}],
        "current-context": "stub",
    }
    path = directory / "kubeconfig"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


def render(
    chart: str,
    values: dict[str, Any],
    release: str = "rel",
    existing: dict[str, Any] | None = None,
    namespace: str = "loadtest",
) -> dict[str, Any]:
    from helm_sdkpy import Configuration, Install

    with StubAPIServer(existing) as api, tempfile.TemporaryDirectory() as tmp:
        kubeconfig = _kubeconfig(api.url, Path(tmp), namespace)
        config = Configuration(namespace=namespace, kubeconfig=str(kubeconfig))
        release = asyncio.run(Install(config).run(release, chart, values=values, wait=False, timeout=60))
        hooks = [h.get("manifest", "") for h in release.get("hooks") or []]
        return {
            "created": api.created,
            "manifest": release.get("manifest", ""),
            "hooks": hooks,
            "notes": (release.get("info") or {}).get("notes", ""),
            "requests": api.requests,
        }


def main(argv: list[str]) -> int:
    if os.environ.get("HELM_DRIVER") != "memory":
        print("set HELM_DRIVER=memory before starting Python", file=sys.stderr)
        return 2
    chart, values_file, out, *rest = argv
    values = yaml.safe_load(Path(values_file).read_text(encoding="utf-8")) or {}
    existing = json.loads(Path(rest[1]).read_text(encoding="utf-8")) if len(rest) > 1 and rest[1] != "-" else None
    try:
        result = render(chart, values, *rest[:1], existing=existing, namespace=rest[2] if len(rest) > 2 else "loadtest")
    except Exception as e:  # Helm's errors: InstallError and friends
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
        return 1
    Path(out).write_text(json.dumps(result, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
