"""The docs: their size bar, their links, and the summaries of GPU results the pages cite.

Raw logs stay out of docs/ (issue 34): a page quotes its figures and cites a compact summary
(docs/PAGE.json, one source per log) beside it."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

DOCS_MAX_BYTES = 262_060
LINK = re.compile(r"\[[^\]]*\]\((?P<target>[^)\s]+)\)")
SUMMARY_CITE = re.compile(r"`(?P<source>[^`]+)` in \[`(?P<summary>[A-Z]+\.json)`\]")


def _pages(repo_root: Path) -> list[Path]:
    return sorted((repo_root / "docs").glob("*.md")) + [repo_root / "README.md",
                                                        repo_root / "CHANGELOG.md"]


def test_docs_under_size_bar(repo_root: Path):
    files = [p for p in (repo_root / "docs").rglob("*") if p.is_file()]
    total = sum(p.stat().st_size for p in files)
    biggest = sorted(files, key=lambda p: p.stat().st_size, reverse=True)[:3]
    assert total <= DOCS_MAX_BYTES, (
        f"docs/ holds {total} bytes, over the {DOCS_MAX_BYTES} bar (largest: "
        + ", ".join(f"{p.relative_to(repo_root)} {p.stat().st_size}" for p in biggest)
        + "); quote figures in the page and compact logs into its summary (docs/GPU.md)")


@pytest.mark.parametrize("page", ["docs", "README.md", "CHANGELOG.md"])
def test_relative_links_resolve(repo_root: Path, page: str):
    pages = sorted((repo_root / "docs").glob("*.md")) if page == "docs" else [repo_root / page]
    broken = []
    for md in pages:
        for m in LINK.finditer(md.read_text()):
            target = m["target"].split("#", 1)[0]
            if not target or re.match(r"^[a-z]+:", target):
                continue
            if not (md.parent / target).exists():
                broken.append(f"{md.relative_to(repo_root)}: {m['target']}")
    assert not broken, "links to missing files: " + "; ".join(broken)


def test_cited_summary_sources_exist(repo_root: Path):
    sources: dict[str, set[str]] = {}
    for summary in (repo_root / "docs").glob("*.json"):
        doc = json.loads(summary.read_text())
        assert doc["page"] == summary.stem + ".md" and doc["sources"], summary
        sources[summary.name] = {s["log"] for s in doc["sources"]}
        assert all(s["lines"] for s in doc["sources"]), f"{summary.name}: a source without lines"
    missing = [f"{md.name}: {m['source']} in {m['summary']}"
               for md in _pages(repo_root) for m in SUMMARY_CITE.finditer(md.read_text())
               if m["source"] not in sources.get(m["summary"], set())]
    assert not missing, "cited summary sources that are not there: " + "; ".join(missing)


def test_readme_layout_matches_the_tree(repo_root: Path):
    """README's Layout section has one line per top-level folder that git tracks, and no other."""
    text = (repo_root / "README.md").read_text()
    section = text.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^- `([^`/]+)/`", section, re.M)
    tracked = subprocess.run(["git", "ls-files"], cwd=repo_root, capture_output=True, text=True,
                             check=True).stdout.split()
    folders = {path.split("/", 1)[0] for path in tracked if "/" in path}
    assert len(listed) == len(set(listed)), f"listed twice: {listed}"
    assert set(listed) == folders, (f"README's Layout lists {sorted(set(listed) - folders)} that are not "
                                    f"folders of the tree, and misses {sorted(folders - set(listed))}")


def test_scripts_holds_only_entry_points(repo_root: Path):
    """scripts/ holds what users and CI run (issue 34): executables, no data files or folders;
    what they read lives in ffmpeg_config/ and ffmpeg_patches/."""
    staged = subprocess.run(["git", "ls-files", "-s", "scripts"], cwd=repo_root, capture_output=True,
                            text=True, check=True).stdout.splitlines()
    entries = [(line.split()[0], line.split("\t", 1)[1]) for line in staged]
    assert entries, "git lists nothing under scripts/"
    others = [path for mode, path in entries if mode != "100755" or path.count("/") != 1]
    assert not others, f"scripts/ holds files that are not entry points: {others}"
