#!/usr/bin/env python3
"""The release workflow's checks (.github/workflows/release.yml), runnable anywhere.

    python scripts/release-check.py version v0.1.0   # prints version=0.1.0; exit 1 unless the tag is v + the
                                                     # package's version, the chart's version and its appVersion
    python scripts/release-check.py dists dist/ 0.1.0  # exit 1 unless dist/ holds the sdist and wheels of that
                                                       # version, every wheel with both compiled halves

One version names everything a tag publishes: the package on PyPI, the image ghcr.io/<owner>/loadgen:<version> (the
chart's default, `image.tag` empty: its appVersion) and the chart oci://ghcr.io/<owner>/charts/loadgen, version
<version>. The C halves are optional in pyproject.toml (a wheel built where they fail still builds), so a wheel
without them is refused here rather than published.
"""

from __future__ import annotations

import argparse
import sys
import tomllib
import zipfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
# The compiled halves every wheel must carry (pyproject.toml's ext-modules), as paths inside the wheel.
EXTENSIONS = (
    "loadgen/protocol/_wire.",
    "loadgen/measure/_hist_walk.",
    "loadgen/measure/_hist_merge.",
    "loadgen/measure/_record.",
)


def versions(root: Path) -> dict[str, str]:
    """Every place a release's version is written: the package's and the chart's version and appVersion."""
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    chart = yaml.safe_load((root / "charts/loadgen/Chart.yaml").read_text(encoding="utf-8"))
    return {
        "pyproject.toml version": str(project["version"]),
        "Chart.yaml version": str(chart["version"]),
        "Chart.yaml appVersion": str(chart["appVersion"]),
    }


def check_version(tag: str, root: Path = ROOT) -> list[str]:
    """What disagrees with the tag ``v<version>`` (empty: all agree)."""
    if not tag.startswith("v"):
        return [f"tag {tag!r} is not v<version>"]
    want = tag[1:]
    return [f"{where} is {got!r}, the tag says {want!r}" for where, got in versions(root).items() if got != want]


def check_dists(folder: Path, version: str) -> list[str]:
    """What is wrong with the distributions in ``folder`` for ``version`` (empty: nothing)."""
    problems = []
    sdists = sorted(folder.glob("*.tar.gz"))
    wheels = sorted(folder.glob("*.whl"))
    if [p.name for p in sdists] != [f"llm_loadgen-{version}.tar.gz"]:
        problems.append(f"want one sdist llm_loadgen-{version}.tar.gz, found {[p.name for p in sdists]}")
    if not wheels:
        problems.append("no wheel")
    for w in wheels:
        if not w.name.startswith(f"llm_loadgen-{version}-"):
            problems.append(f"{w.name}: not version {version}")
        names = zipfile.ZipFile(w).namelist()
        for ext in EXTENSIONS:
            if not any(n.startswith(ext) and n.endswith(".so") for n in names):
                problems.append(f"{w.name}: no {ext}*.so (the C half did not build)")
    return problems


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("version", help="the tag against the package's and the chart's versions")
    v.add_argument("tag")
    d = sub.add_parser("dists", help="the built sdist and wheels")
    d.add_argument("folder", type=Path)
    d.add_argument("version")
    args = p.parse_args(argv)
    problems = check_version(args.tag) if args.cmd == "version" else check_dists(args.folder, args.version)
    for problem in problems:
        print(f"release-check: {problem}", file=sys.stderr)
    if problems:
        return 1
    if args.cmd == "version":
        print(f"version={args.tag[1:]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
