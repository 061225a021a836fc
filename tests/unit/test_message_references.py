"""What the package's messages point a person to exists where the package is installed: a README
heading (with its anchor) or a URL, never a path of the repository's ``docs/``, which is not in
the wheel (a zero-length interval's message sent users to ``docs/usage.md``)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import airflow_provider_kinesis_doris
from airflow_provider_kinesis_doris.core.errors import readme_section

PACKAGE = Path(airflow_provider_kinesis_doris.__file__).parent
README = Path(__file__).parents[2] / "README.md"

DOCS_PATH = re.compile(r"(?<![\w/.])docs/[\w./-]+")
"""``docs/usage.md`` on its own; ``https://host/docs/...`` is a URL and passes."""


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that stand as statements of their own: docstrings of modules,
    classes, functions and attributes, read in the repository, never shown to a user."""
    return {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}


def _message_strings() -> Iterator[tuple[str, int, str]]:
    """(file, line, text) of every string literal of the package that is not a docstring."""
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        docstrings = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                yield str(path.relative_to(PACKAGE)), node.lineno, node.value


def _readme_sections_named() -> Iterator[tuple[str, int, str]]:
    """(file, line, title) of every ``readme_section("<title>")`` call in the package."""
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "readme_section":
                (title,) = node.args
                assert isinstance(title, ast.Constant), f"{path}:{node.lineno}: name the section literally"
                yield str(path.relative_to(PACKAGE)), node.lineno, title.value


def test_no_message_points_to_a_file_of_the_repositorys_docs() -> None:
    pointing = [f"{path}:{line}: {DOCS_PATH.search(text).group()}" for path, line, text in _message_strings()
                if DOCS_PATH.search(text)]  # fmt: skip

    assert not pointing, "messages name files that are not in the wheel:\n" + "\n".join(pointing)


def test_every_readme_section_a_message_names_is_a_heading_of_the_readme() -> None:
    headings = {line.lstrip("#").strip() for line in README.read_text().splitlines() if line.startswith("##")}
    named = list(_readme_sections_named())

    assert len(named) >= 5, named
    assert [f"{path}:{line}: {title}" for path, line, title in named if title not in headings] == []


def test_a_readme_section_carries_the_anchor_github_gives_its_heading() -> None:
    assert readme_section("Exactly once: what is guaranteed, and the limits") == (
        'the README, "Exactly once: what is guaranteed, and the limits" (https://github.com/'
        "airflow-provider-kinesis-doris/airflow-provider-kinesis-doris#exactly-once-what-is-guaranteed-and-the-limits)"
    )
