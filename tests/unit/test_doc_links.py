"""Every relative link of the README and docs/*.md reaches a file of the repository and, when it
names one, a heading of that file: a section moved or renamed without its links fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
"""``[text](target)``, the only link form these pages use; images (``![alt](path)``) match too."""
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lowercase, punctuation other than ``-`` and spaces
    dropped, each space a ``-``."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of ``page``'s headings (outside code blocks, where ``#`` starts a comment)."""
    text = FENCE.sub("", page.read_text())
    return {github_anchor(line.lstrip("#")) for line in text.splitlines() if re.match(r"#{1,6} ", line)}


def broken_links(page: Path) -> list[str]:
    """``page``'s relative links whose file or heading does not exist."""
    broken = []
    for target in LINK.findall(FENCE.sub("", page.read_text())):
        if re.match(r"[a-z]+:", target):  # https:, mailto:: not ours to check
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no file {linked}")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading with anchor #{anchor} in {linked}")
    return broken


def test_github_anchor_follows_githubs_rule() -> None:
    assert github_anchor("Exactly once: what is guaranteed, and the limits") == "exactly-once-what-is-guaranteed-and-the-limits"
    assert github_anchor("The pipeline page (Airflow 3.1+)") == "the-pipeline-page-airflow-31"
    assert github_anchor("`runner`: `SparkRunner`") == "runner-sparkrunner"
    assert github_anchor("Moving to a new pipeline_id") == "moving-to-a-new-pipeline_id"


def test_a_broken_link_is_found(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other\n\n## A heading\n")
    page.write_text("[ok](other.md#a-heading) [no file](gone.md) [no anchor](other.md#gone) [here](#other)\n")

    found = broken_links(page)

    assert [entry.split(":")[0] for entry in found] == ["gone.md", "other.md#gone", "#other"]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken_links(page) == []
