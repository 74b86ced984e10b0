"""Links in the README, the docs and the chart's README land on a file, and a `#anchor` on a heading of it, by the
anchor GitHub and the docs site both make of the heading's text (mkdocs.yml's toc slugify is GitHub's). A `{#id}`
heading attribute would print as text on GitHub, so none is written."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "charts" / "loadgen" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
_FENCE = re.compile(r"^(```|~~~).*?^\1", flags=re.MULTILINE | re.DOTALL)
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: its text (code spans, links and emphasis as text), lowercased, every character
    but letters, digits, `_`, `-` and spaces dropped, each space a hyphen."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").replace("*", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def _prose(page: Path) -> str:
    return _FENCE.sub("", page.read_text(encoding="utf-8"))


def headings(page: Path) -> list[str]:
    return re.findall(r"^#{1,6} +(.+?) *#*$", _prose(page), flags=re.MULTILINE)


def anchors(page: Path) -> set[str]:
    """The page's anchors; a heading whose slug repeats gets none here (GitHub says -1, the site _1: link neither)."""
    slugs = [slug(h) for h in headings(page)]
    return {s for s in slugs if slugs.count(s) == 1}


def broken_links(page: Path) -> list[str]:
    name = page.relative_to(ROOT) if page.is_relative_to(ROOT) else page.name
    broken = []
    for target in _LINK.findall(_prose(page)):
        if "://" in target or target.startswith("mailto:"):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{name}: {target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{name}: {target} (no heading makes #{anchor})")
    return broken


def test_no_heading_carries_an_attribute_list() -> None:
    found = [f"{p.relative_to(ROOT)}: {h}" for p in PAGES for h in headings(p) if "{#" in h or "{:" in h]
    assert found == []


def test_every_relative_link_lands_on_a_file_and_a_heading() -> None:
    assert sum("#" in t and "://" not in t for p in PAGES for t in _LINK.findall(_prose(p))) > 50  # anchors checked
    assert [b for page in PAGES for b in broken_links(page)] == []


def test_the_slugs_are_githubs() -> None:
    assert slug("`loadgen k8s run`") == "loadgen-k8s-run"
    assert slug("Sweeps: latency–throughput curves and the knee") == "sweeps-latencythroughput-curves-and-the-knee"
    assert slug("Across runs: `loadgen compare`") == "across-runs-loadgen-compare"
    assert slug("A — B / C") == "a--b--c"  # GitHub keeps every hyphen a space made


def test_a_broken_link_is_found(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# A\n\n## Two words\n\n[ok](#two-words) [no](#two) [gone](b.md)\n")
    assert broken_links(tmp_path / "a.md") == ["a.md: #two (no heading makes #two)", "a.md: b.md (no such file)"]
