"""Where the kit's project is (rollout_sdk/project.py): its root found from the package, a
relative path taken from the current folder or else the root, and an extra's install command
said for a copy of the repository or for the package installed on its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollout_sdk import project

pytestmark = pytest.mark.timeout(30)

ROOT = Path(__file__).resolve().parents[2]


def test_the_root_is_the_repository_holding_the_package() -> None:
    assert project.project_root() == ROOT


def test_a_relative_path_falls_back_to_the_project_s_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert project.project_path("template.yaml") == str(ROOT / "template.yaml")
    (tmp_path / "template.yaml").write_text("mine")
    assert project.project_path("template.yaml") == "template.yaml"  # the current folder's first
    assert project.project_path("no/such/file") == "no/such/file"  # left for the caller to refuse


def test_an_extra_is_installed_into_the_project_in_a_copy_of_the_repository() -> None:
    assert project.install_hint("mcp") == f"pip install -c constraints.txt -e '.[mcp]' in {ROOT}"


def test_an_extra_is_the_package_s_when_installed_on_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(project, "project_root", lambda: None)
    assert project.install_hint("parquet") == "pip install 'rollout-sdk[parquet]'"
