"""The package tree is the architecture: rules checked by walking it, not by a hand-kept list.

- gevent (and geventhttpclient) only in `client/` and `locust_plugin/`; locust only in `locust_plugin/`;
- kubernetes (an optional extra) only in `k8s/`, and there only inside functions, so loadgen runs without it;
- no import cycles between loadgen's modules (at module level, where a cycle breaks an import, nor through imports
  deferred into functions);
- no Python module over 500 lines;
- config/ is pure: its modules, and everything they import (deferred imports too), stay within `CONFIG_MAY_IMPORT`
  (the model, the name registries it checks names against, the exit codes): never the request path's later stages
  (traffic, client, measure, report, live, ...) nor `loadgen.preflight`, where the checks that read files or ask
  servers live; and config reads no file but the scenario itself (`read_document`) and opens no connection;
- and, at run time, importing every module outside those two packages pulls in neither locust nor gevent (importing
  locust monkey-patches the whole process);
- and collecting the test suite imports no locust either: inside the pytest process the patch breaks the tests beside
  it (tests that need Locust run their check in a fresh interpreter, tests/fresh_interpreter.py).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "loadgen"
GEVENT_OK = ("loadgen.client", "loadgen.locust_plugin")
LOCUST_OK = ("loadgen.locust_plugin",)
KUBERNETES_OK = ("loadgen.k8s",)
MAX_LINES = 500
# What config/ may reach, directly or through what it imports: the model validates shapes and values only.
CONFIG_MAY_IMPORT = (
    "loadgen.config",
    "loadgen.registry",
    "loadgen.metric_names",
    "loadgen.exit_codes",
    "loadgen.protocol.dialects",  # the dialect names a variant may give
)
# Standard or third-party modules that open connections or run programs: none of config's business.
CONFIG_NO_IO_MODULES = {"socket", "ssl", "http", "urllib.request", "httpx", "requests", "subprocess", "gevent"}
# Calls that read (or stat) files; config's one file is the scenario, read in `read_document`.
FILE_CALLS = {"open", "read_text", "read_bytes", "exists", "is_file", "is_dir", "stat", "iterdir", "glob"}


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(name: str, *, top_level_only: bool) -> set[str]:
    """Absolute names of what a module imports (relative imports resolved). `top_level_only` skips imports inside
    functions and `if TYPE_CHECKING:` blocks, which run later or never."""
    path = MODULES[name]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    nodes: list[ast.stmt] = []
    if top_level_only:
        for node in tree.body:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            nodes += [*node.body, *(s for h in node.handlers for s in h.body)] if isinstance(node, ast.Try) else [node]
    else:
        nodes = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - max(node.level - 1, 0)] if node.level else []
            mod = ".".join([*base, *([node.module] if node.module else [])])
            found.add(mod)
            found |= {f"{mod}.{a.name}" for a in node.names if f"{mod}.{a.name}" in MODULES}  # a submodule
    return found


def _inside(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def test_the_walk_sees_the_tree() -> None:
    # A walk that found nothing would pass every rule below.
    for name in ("loadgen.config.scenario", "loadgen.protocol.chunked", "loadgen.client.reactor", "loadgen.sim"):
        assert name in MODULES
    assert "gevent" in {i.split(".")[0] for i in _imports("loadgen.client.reactor", top_level_only=False)}
    assert "loadgen.measure.records" in _imports("loadgen.protocol.accumulator", top_level_only=True)
    assert "kubernetes" in _imports("loadgen.k8s.api", top_level_only=False)
    assert "kubernetes" not in _imports("loadgen.k8s.api", top_level_only=True)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_gevent_and_locust_only_where_allowed(name: str) -> None:
    roots = {i.split(".")[0] for i in _imports(name, top_level_only=False)}
    if not _inside(name, GEVENT_OK):
        assert not roots & {"gevent", "geventhttpclient"}, f"{name} imports gevent: only {GEVENT_OK} may"
    if not _inside(name, LOCUST_OK):
        assert "locust" not in roots, f"{name} imports locust: only {LOCUST_OK} may"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_kubernetes_only_in_k8s_and_only_when_used(name: str) -> None:
    everywhere = {i.split(".")[0] for i in _imports(name, top_level_only=False)}
    at_import = {i.split(".")[0] for i in _imports(name, top_level_only=True)}
    if not _inside(name, KUBERNETES_OK):
        assert "kubernetes" not in everywhere, f"{name} imports kubernetes: only {KUBERNETES_OK} may"
    assert "kubernetes" not in at_import, f"{name} imports kubernetes at import time: the k8s extra is optional"


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    found: list[list[str]] = []
    state: dict[str, int] = {}  # 1 on the path, 2 done
    path: list[str] = []

    def visit(n: str) -> None:
        state[n] = 1
        path.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                found.append([*path[path.index(m) :], m])
            elif m not in state:
                visit(m)
        path.pop()
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n)
    return found


def test_the_cycle_finder_finds_cycles() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("top_level_only", [True, False], ids=["at-import", "including-deferred"])
def test_no_import_cycles(top_level_only: bool) -> None:
    # Deferred imports (inside a function) count too: a cycle hidden in a function is still a tangle of stages.
    graph = {n: {i for i in _imports(n, top_level_only=top_level_only) if i in MODULES and i != n} for n in MODULES}
    assert _cycles(graph) == []


def _reach(start: list[str]) -> set[str]:
    """Every loadgen module ``start`` imports, directly or not, deferred imports included."""
    graph = {n: {i for i in _imports(n, top_level_only=False) if i in MODULES and i != n} for n in MODULES}
    seen, todo = set(start), list(start)
    while todo:
        for m in graph[todo.pop()] - seen:
            seen.add(m)
            todo.append(m)
    return seen


def test_config_imports_nothing_of_the_later_stages() -> None:
    config = [n for n in MODULES if _inside(n, ("loadgen.config",))]
    reached = _reach(config)
    assert {"loadgen.config.scenario", "loadgen.registry"} <= reached  # the walk walked
    strays = sorted(n for n in reached if not _inside(n, CONFIG_MAY_IMPORT))
    assert strays == [], f"config/ reaches {strays}: the model may import only {CONFIG_MAY_IMPORT}"
    # The rule bites where it was broken: the preflight step reaches traffic, and config reaches neither.
    assert "loadgen.traffic.server_tokenizer" in _reach(["loadgen.preflight"])
    assert not {n for n in reached if _inside(n, ("loadgen.traffic", "loadgen.preflight", "loadgen.live"))}


@pytest.mark.parametrize("name", sorted(n for n in MODULES if _inside(n, ("loadgen.config",))))
def test_config_opens_no_connection_and_reads_no_file_but_the_scenario(name: str) -> None:
    imported = _imports(name, top_level_only=False)
    io = sorted(i for i in imported if i in CONFIG_NO_IO_MODULES or i.split(".")[0] in CONFIG_NO_IO_MODULES)
    assert io == [], f"{name} imports {io}: checks that ask servers belong in loadgen/preflight.py"
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    readers = {f.name: f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.name == "read_document"}
    allowed = {id(n) for f in readers.values() for n in ast.walk(f)}
    calls = [
        ast.unparse(n.func)
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and id(n) not in allowed
        and (n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")) in FILE_CALLS
    ]
    assert calls == [], f"{name} calls {calls}: checks that read files belong in loadgen/preflight.py"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_over_500_lines(name: str) -> None:
    lines = MODULES[name].read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_LINES, f"{name} has {lines} lines (> {MAX_LINES}): split it"


def test_the_pure_stages_import_neither_locust_nor_gevent_at_run_time() -> None:
    pure = [n for n in MODULES if not _inside(n, GEVENT_OK) and not n.endswith("__main__")]
    code = (
        "import importlib, sys\n"
        f"for m in {pure!r}: importlib.import_module(m)\n"
        "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in ('locust', 'gevent', 'geventhttpclient'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", out


def test_collecting_the_tests_imports_no_locust() -> None:
    tests = PKG.parent / "tests"
    names = [".".join(p.relative_to(PKG.parent).with_suffix("").parts) for p in sorted(tests.rglob("test_*.py"))]
    code = (
        "import importlib, sys\n"
        f"for m in {names!r}: importlib.import_module(m)\n"
        "patched = 'gevent.monkey' in sys.modules and sys.modules['gevent.monkey'].is_anything_patched()\n"
        "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] == 'locust')) + (' patched' * patched))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PKG.parent)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "", run.stdout
