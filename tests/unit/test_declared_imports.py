"""Every third-party module the package and the tests import is declared where it is needed.

A module that arrives only through another package's dependencies works until that package's next release stops
pulling it (httpx reached the tests through huggingface_hub for months, then a fresh clone's CI went red at
collection). So: each import of `loadgen/` names a distribution declared in the base dependencies or in an extra, and
each import of `tests/` one declared in the extra the test command installs (`dev`, with the extras it pulls) or in
`requirements/ci-requirements.txt` (what pip cannot install through an extra: helm-sdkpy declares Python >= 3.12).
Declared directly, not merely installed: the walk maps import names to distributions with the installed metadata,
then asks the project's own declarations.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIRST_PARTY = {"loadgen", "tests", "bench"}


def _name(requirement: str) -> str:
    """The normalised distribution name of a requirement string (PEP 503)."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def _declared() -> tuple[set[str], dict[str, set[str]]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras: dict[str, set[str]] = {}
    for extra, requirements in project["optional-dependencies"].items():
        extras[extra] = set()
        for requirement in requirements:
            pulled = re.fullmatch(r"llm-loadgen\[([a-z0-9,-]+)\]", requirement.replace(" ", ""))
            if pulled:  # an extra that pulls others: resolved below
                extras[extra] |= {f"[{e}]" for e in pulled.group(1).split(",")}
            else:
                extras[extra].add(_name(requirement))
    for names in extras.values():
        for pulled in [n for n in names if n.startswith("[")]:
            names |= extras[pulled[1:-1]]
    return {_name(r) for r in project["dependencies"]}, {k: {n for n in v if n[0] != "["} for k, v in extras.items()}


def _ci_extra() -> set[str]:
    lines = (ROOT / "requirements" / "ci-requirements.txt").read_text().splitlines()
    return {_name(line) for line in lines if line.strip() and not line.lstrip().startswith(("#", "-"))}


def _third_party_imports(folder: str) -> dict[str, set[str]]:
    """Top-level third-party import name -> the files importing it (anywhere in the file)."""
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / folder).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in FIRST_PARTY and top != "__future__":
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def _distributions(module: str) -> set[str]:
    return {_name(d) for d in packages_distributions().get(module, [])}


def _undeclared(folder: str, allowed: set[str]) -> list[str]:
    problems = []
    for module, files in sorted(_third_party_imports(folder).items()):
        dists = _distributions(module)
        if not dists:
            problems.append(f"{module} (imported in {sorted(files)[0]}) is not installed: declare and install it")
        elif not dists & allowed:
            problems.append(f"{module} (imported in {sorted(files)[0]}) comes from {sorted(dists)}, declared nowhere")
    return problems


def test_the_walk_sees_third_party_imports() -> None:
    imports = _third_party_imports("tests")
    assert "pytest" in imports and "hypothesis" in imports and "loadgen" not in imports and "os" not in imports
    assert _distributions("yaml") == {"pyyaml"}
    base, extras = _declared()
    assert "pydantic" in base and "tokenizers" in extras["dev"]  # dev pulls the tokenizer extra


def test_the_package_imports_only_what_it_declares() -> None:
    base, extras = _declared()
    allowed = base | set().union(*extras.values())
    assert _undeclared("loadgen", allowed) == []


@pytest.mark.parametrize("folder", ["tests", "bench"])
def test_the_tests_import_only_what_the_test_command_installs(folder: str) -> None:
    base, extras = _declared()
    allowed = base | extras["dev"] | _ci_extra() | (extras["bench"] if folder == "bench" else set())
    assert _undeclared(folder, allowed) == []
