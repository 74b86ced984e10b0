"""Commands as the README and the example scenarios write them, found in the text and run as written.

- `readme_blocks`: the README's shell blocks, each with the marker in the HTML comment above it (invisible on the
  forge and the site) that says how the tests run it (tests/unit/test_readme_commands.py lists the markers); the
  task pages' blocks the same way, their marker `page-test` (tests/integration/test_task_page_blocks.py);
- `comment_commands`: the commands in an example scenario's opening comment (indented lines, `\\` continuations);
- `shell_env`: an environment in which a pasted command runs against this checkout: PATH starts with `loadgen`,
  `locust` and `python` shims (this interpreter, this checkout on PYTHONPATH). Two test hooks, each visible where a
  test uses it: `test_args`, flags the `loadgen` shim appends to `loadgen demo` and `loadgen run` (a shorter run:
  the only change made to a command; or, as a mapping, to each subcommand it names: `{"sweep": "--max-steps 2"}`);
  and `blocked`, top-level modules whose import fails in every process of the session (a `sitecustomize` on
  PYTHONPATH), as in an environment that never installed them;
- `extras_only_modules`: what to block so that a session has only what `pip install -e .` (plus the extras named)
  installs: the modules of every distribution an extra adds that loadgen's own dependencies do not bring.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
DIST = "llm-loadgen"
# Appended (with a shorter duration) to the `loadgen demo` / `loadgen run` the docs show: on a shared 2-core machine
# another process's load can make the generator's own health the verdict (exit 3), which is not what is tested here.
LOOSE_TRUST = (
    "--set run_trust.loop_lag_p99_ms=500 --set run_trust.schedule_slip_p99_ms=500 --set run_trust.cpu_percent_p90=100"
)
# The commands of the README's `cluster` block that tests/k8s_chart/test_readme_cluster.py knows how to check.
CLUSTER_COMMANDS = ("helm install ", "loadgen k8s run ")

__all__ = [
    "CLUSTER_COMMANDS",
    "DIST",
    "LOOSE_TRUST",
    "ROOT",
    "Block",
    "block_commands",
    "comment_commands",
    "extras_only_modules",
    "readme_blocks",
    "shell_env",
]


@dataclass(frozen=True)
class Block:
    """A ```bash block: its marker's kind and argument (`run`, `given last-night/report.json`), code, first line."""

    kind: str
    arg: str
    code: str
    line: int


_BLOCK = r"(?:<!--\s*{marker}:\s*(?P<marker>.*?)\s*-->\n)?```(?:bash|sh|console)\n(?P<code>.*?)```"


def readme_blocks(markdown: str, marker: str = "readme-test") -> list[Block]:
    """Every shell block, in order; a block without a marker (`<!-- MARKER: kind arg -->`) has kind ''."""
    out = []
    for m in re.finditer(_BLOCK.format(marker=re.escape(marker)), markdown, flags=re.S):
        kind, _, arg = (m.group("marker") or "").partition(" ")
        arg = arg.strip().removeprefix(",").strip()
        out.append(Block(kind.rstrip(","), arg, m.group("code"), markdown.count("\n", 0, m.start("code")) + 1))
    return out


def block_commands(code: str) -> list[str]:
    """The commands of a block, one string each: continuations joined, comments dropped, `a && b` two commands."""
    out = []
    for line in code.replace("\\\n", " ").splitlines():
        current: list[str] = []
        for word in [*shlex.split(line, comments=True), "&&"]:
            if word == "&&":
                if current:
                    out.append(shlex.join(current).replace("'", '"'))
                current = []
            else:
                current.append(word)
    return out


def comment_commands(text: str) -> list[str]:
    """The commands of a scenario's opening comment: lines indented past `#` by three spaces, `\\` continuing one."""
    out, pending = [], ""
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        body = line[1:]
        if pending:
            pending += " " + body.strip()
        elif body.startswith("   ") and body.strip():
            pending = body.strip()
        else:
            continue
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip()
        else:
            out.append(re.sub(r"\s+#\s.*$", "", pending))  # a comment after the command
            pending = ""
    return out


_LOADGEN_SHIM = """#!/bin/sh
# loadgen as this checkout runs it; $LOADGEN_TEST_ARGS_<command> appended to that command (tests/commands.py)
case "$1" in
  demo|run|sweep) eval "extra=\\${LOADGEN_TEST_ARGS_$1-}" ;;
  *) extra= ;;
esac
exec PYTHON -m loadgen "$@" $extra
"""
SHORTENED = ("demo", "run", "sweep")  # the commands whose flags a test may append

_SITECUSTOMIZE = """# Written by tests/commands.py: these modules cannot be imported, as if never installed.
import sys

BLOCKED = frozenset({blocked!r})


class _Absent:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}} (not installed by the README's install command)",
                                      name=name)
        return None


sys.meta_path.insert(0, _Absent)
"""


def shell_env(tmp: Path, blocked: Iterable[str] = (), test_args: str | Mapping[str, str] = "") -> dict[str, str]:
    """The environment of a session in `tmp`: the shims first on PATH, this checkout on PYTHONPATH (after the
    blocking `sitecustomize` when `blocked` names any module); `test_args`, appended to `loadgen demo` and `loadgen
    run`, or to each command (`demo`, `run`, `sweep`) a mapping names."""
    bin_dir, site = tmp / ".shims", tmp / ".site"
    bin_dir.mkdir(parents=True, exist_ok=True)
    python = shlex.quote(sys.executable)
    shims = {
        "loadgen": _LOADGEN_SHIM.replace("PYTHON", python),
        "locust": f'#!/bin/sh\nexec {python} -m locust "$@"\n',
        "python": f'#!/bin/sh\nexec {python} "$@"\n',
    }
    for name, text in shims.items():
        (bin_dir / name).write_text(text, encoding="utf-8")
        (bin_dir / name).chmod(0o755)
    paths = [str(ROOT)]
    if blocked:
        site.mkdir(exist_ok=True)
        (site / "sitecustomize.py").write_text(_SITECUSTOMIZE.format(blocked=sorted(blocked)), encoding="utf-8")
        paths.insert(0, str(site))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("LOADGEN_TEST_ARGS")}
    env |= {"PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", "PYTHONPATH": os.pathsep.join(paths)}
    appended = {"demo": test_args, "run": test_args} if isinstance(test_args, str) else dict(test_args)
    assert set(appended) <= set(SHORTENED), f"the loadgen shim appends flags to {SHORTENED} only: {appended}"
    env |= {f"LOADGEN_TEST_ARGS_{command}": flags for command, flags in appended.items() if flags}
    return env


def _project() -> dict[str, Any]:
    """pyproject.toml's [project] table: the dependencies as they are now, not as the last install recorded them."""
    return dict(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"])


def _installed(name: str) -> bool:
    try:
        metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return False
    return True


def _closure(reqs: Iterable[Requirement]) -> set[str]:
    """Every installed distribution `reqs` bring, through their own requirements (markers evaluated here)."""
    seen: set[str] = set()
    todo = [r for r in reqs if r.marker is None or r.marker.evaluate({"extra": ""})]
    while todo:
        req = todo.pop()
        key = canonicalize_name(req.name)
        if key in seen or not _installed(req.name):
            continue
        seen.add(key)
        for text in metadata.requires(req.name) or []:
            sub = Requirement(text)
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in ("", *req.extras)):
                todo.append(sub)
    return seen


def _with_extras(extras: Iterable[str]) -> list[Requirement]:
    """loadgen's dependencies with `extras`, an extra that names loadgen's own (`llm-loadgen[tokenizer]`) expanded."""
    project = _project()
    optional: dict[str, list[str]] = project.get("optional-dependencies", {})
    out = [Requirement(r) for r in project["dependencies"]]
    todo, done = list(extras), set()
    while todo:
        extra = todo.pop()
        if extra in done:
            continue
        done.add(extra)
        for text in optional[extra]:
            req = Requirement(text)
            if canonicalize_name(req.name) == canonicalize_name(DIST):
                todo += req.extras
            else:
                out.append(req)
    return out


def extras_only_modules(installed_extras: Iterable[str] = ()) -> set[str]:
    """Top-level modules of the distributions that only loadgen's extras add (other than `installed_extras`)."""
    every = list(_project().get("optional-dependencies", {}))
    base = _closure(_with_extras(installed_extras))
    extra_dists = _closure(_with_extras(every)) - base
    modules: set[str] = set()
    for module, dists in metadata.packages_distributions().items():
        if dists and all(canonicalize_name(d) in extra_dists for d in dists) and module.isidentifier():
            modules.add(module)
    return modules
