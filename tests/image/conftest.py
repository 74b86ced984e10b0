"""The image of this tree, and containers run from it as the chart's pods run.

`scripts/build-image` builds the image with podman from a Debian base made with mmdebstrap (no registry pulled),
or reuses the one built from the same tree; .ci/run calls it before the tests. If it fails, the fixture fails the
test with the script's message (a runtime's refusal is named there): a missing image must not pass as a skip.

`Pod` turns a container of the rendered chart into `podman run` options: the pod's user, group and fsGroup, the
container's read-only root filesystem, dropped capabilities and no privilege escalation, each volume as the kubelet
gives it (the ConfigMap's files read-only, each emptyDir a directory of the node writable by the fsGroup), the env with
each secretKeyRef read from the rendered Secret, the command and arguments. Containers share the host's network (what
this machine kind's podman runs); names carry the test process's pid and are removed by name at the end.
"""

from __future__ import annotations

import base64
import os
import shlex
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Image:
    name: str
    run_flags: list[str]  # what this machine needs for any `podman run` (runtime, ulimits, network)


@pytest.fixture(scope="session")
def image() -> Image:
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "build-image")], capture_output=True, text=True, timeout=3600, cwd=ROOT
    )
    assert proc.returncode == 0, f"scripts/build-image failed:\n{proc.stderr[-4000:]}"
    out = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    return Image(out["image"], shlex.split(out["run_flags"]))


def podman(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout)


class Pod:
    """One pod of the rendered chart (`objs`: every object Helm created), its volumes made under ``tmp``."""

    def __init__(self, objs: list[dict[str, Any]], workload: str, tmp: Path) -> None:
        (w,) = [o for o in objs if o["kind"] in ("Job", "Deployment") and o["metadata"]["name"] == workload]
        self.spec: dict[str, Any] = w["spec"]["template"]["spec"]
        self._secrets = {o["metadata"]["name"]: o.get("data", {}) for o in objs if o["kind"] == "Secret"}
        maps = {o["metadata"]["name"]: o["data"] for o in objs if o["kind"] == "ConfigMap"}
        psc = self.spec["securityContext"]
        self.volumes: dict[str, Path] = {}
        for v in self.spec["volumes"]:
            d = tmp / workload / v["name"]
            d.mkdir(parents=True)
            if "configMap" in v:
                for key, text in maps[v["configMap"]["name"]].items():
                    (d / key).write_text(text, encoding="utf-8")
            else:
                assert "emptyDir" in v, v
                os.chown(d, 0, psc["fsGroup"])
                d.chmod(0o2775)  # the fsGroup's, as the kubelet makes an emptyDir for a pod with fsGroup
            self.volumes[v["name"]] = d

    def container(self, name: str) -> dict[str, Any]:
        (c,) = [c for c in self.spec.get("initContainers", []) + self.spec["containers"] if c["name"] == name]
        return dict(c)

    def env(self, c: Mapping[str, Any]) -> dict[str, str]:
        env = {}
        for e in c.get("env", []):
            if "value" in e:
                env[e["name"]] = e["value"]
            else:
                ref = e["valueFrom"]["secretKeyRef"]
                env[e["name"]] = base64.b64decode(self._secrets[ref["name"]][ref["key"]]).decode()
        return env

    def security_flags(self, c: Mapping[str, Any]) -> list[str]:
        """The pod's and the container's securityContext as podman options (every field the chart sets)."""
        psc, sc = self.spec["securityContext"], c["securityContext"]
        assert psc["runAsNonRoot"] and psc["seccompProfile"]["type"] == "RuntimeDefault" and not sc["privileged"]
        flags = ["--user", f"{psc['runAsUser']}:{psc['runAsGroup']}", "--group-add", str(psc["fsGroup"])]
        if sc["readOnlyRootFilesystem"]:
            # podman's --read-only alone adds tmpfs on /tmp, /var/tmp and /run; a pod gets only its volumes.
            flags += ["--read-only", "--read-only-tmpfs=false"]
        flags += [f for cap in sc["capabilities"]["drop"] for f in ("--cap-drop", cap)]
        if sc["allowPrivilegeEscalation"] is False:
            flags += ["--security-opt", "no-new-privileges"]
        return flags

    def argv(
        self,
        image: Image,
        name: str,
        container: str,
        swap: Mapping[str, str] | None = None,
        command: list[str] | None = None,
    ) -> list[str]:
        """`podman run` of a container of this pod, its command's words in ``swap`` replaced (ports, the master's
        host); ``command`` runs instead of the container's own (a probe with the same user, mounts and limits)."""
        c = self.container(container)
        flags = ["run", "--rm", "--name", name, *image.run_flags, *self.security_flags(c)]
        for m in c["volumeMounts"]:
            flags += ["-v", f"{self.volumes[m['name']]}:{m['mountPath']}:{'ro' if m.get('readOnly') else 'rw'}"]
        for k, v in self.env(c).items():
            flags += ["-e", f"{k}={v}"]
        cmd = command or [(swap or {}).get(a, a) for a in c["command"] + c.get("args", [])]
        return ["podman", *flags, "--entrypoint", cmd[0], image.name, *cmd[1:]]


@pytest.fixture
def container_names() -> Iterator[list[str]]:
    """Names a test gives its containers (pid-tagged); each still there at the end is removed, by name."""
    names: list[str] = []
    yield names
    for n in names:
        podman("rm", "-f", "-t", "0", n)


def container_name(names: list[str], role: str) -> str:
    name = f"lg-image-{os.getpid()}-{role}"
    names.append(name)
    return name
