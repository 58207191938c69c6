"""What docs/aws.md says of the template, held to template.yaml: its parameters table names
every parameter and no other, and the first deploy's outputs table every output."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rollout_sdk.local.emulator import load_template

pytestmark = pytest.mark.timeout(30)

ROOT = Path(__file__).resolve().parents[2]
AWS_MD = (ROOT / "docs" / "aws.md").read_text()
TEMPLATE = load_template(ROOT / "template.yaml")


def _section(title: str) -> str:
    start = AWS_MD.index(title)
    following = AWS_MD.find("\n## ", start + len(title))
    return AWS_MD[start : following if following != -1 else None]


def _first_column(text: str) -> set[str]:
    """The backticked names in the first cell of each table row."""
    names: set[str] = set()
    for line in text.splitlines():
        cells = line.strip().split("|")
        if len(cells) > 2 and not set(cells[1].strip()) <= {"-"}:
            names.update(re.findall(r"`([A-Za-z]+)`", cells[1]))
    return names


def test_the_parameters_table_names_every_template_parameter() -> None:
    documented = _first_column(_section("## Parameters"))
    assert documented == set(TEMPLATE["Parameters"]), (
        f"undocumented: {sorted(set(TEMPLATE['Parameters']) - documented)}; "
        f"not in the template: {sorted(documented - set(TEMPLATE['Parameters']))}"
    )


def test_the_first_deploy_lists_every_output() -> None:
    section = _section("## First deploy")
    outputs = set(TEMPLATE["Outputs"])
    assert _first_column(section) == outputs  # its one table: the outputs
    words = {4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight"}
    assert f"{words[len(outputs)]} outputs" in section


def test_readmes_table_of_test_options_is_test_s_help() -> None:
    """Every option README's ``rollout-sdk test`` table names is one ``test --help`` has, and
    the other way round."""
    import argparse

    from rollout_sdk.local.cli import build_parser

    readme = (ROOT / "README.md").read_text()
    start = readme.index("| Option | Default | |")
    table = readme[start : readme.index("\n\n", start)]
    documented = set(re.findall(r"`(-{1,2}[a-z][a-z-]*)", table))
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    test = sub.choices["test"]
    offered = {
        option
        for action in test._actions
        for option in action.option_strings
        if option not in ("-h", "--help")
    }
    assert documented == offered, (
        f"in --help only: {sorted(offered - documented)}; in README only: "
        f"{sorted(documented - offered)}"
    )
