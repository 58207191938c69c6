"""Tests and benchmarks share :mod:`testkit`; neither imports the other, and the wheel imports
neither (checked on the source's syntax trees, so no module is imported to find out)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit import REPO_ROOT


def imported(path: Path) -> Iterator[tuple[int, str]]:
    """(line, top-level package) of every absolute import in ``path``."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name.partition(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module.partition(".")[0]


@pytest.mark.parametrize(
    ("folder", "forbidden"),
    [
        ("tests", {"bench"}),
        ("bench", {"tests"}),
        ("testkit", {"bench", "tests"}),
        ("rollout_sdk", {"bench", "tests", "testkit"}),
    ],
)
def test_no_folder_imports_what_it_must_not(folder: str, forbidden: set[str]) -> None:
    files = sorted((REPO_ROOT / folder).rglob("*.py"))
    assert files
    found = [
        f"{path.relative_to(REPO_ROOT)}:{line} imports {name}"
        for path in files
        for line, name in imported(path)
        if name in forbidden
    ]
    assert found == []


def test_the_scan_sees_a_forbidden_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("import os\nfrom bench.load import main\n\ndef f():\n    import tests.x\n")
    assert [name for _, name in imported(module)] == ["os", "bench", "tests"]
