"""What docs/aws.md says of the template, held to template.yaml: its parameters table names
every parameter and no other, and the first deploy's outputs table every output."""

from __future__ import annotations

import argparse
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


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    from rollout_sdk.local.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {
        option
        for action in parser._actions
        for option in action.option_strings
        if option not in ("-h", "--help")
    }


def test_the_table_of_test_s_options_is_test_s_help() -> None:
    """Every option docs/local.md's ``rollout-sdk test`` table names is one ``test --help``
    has, and the other way round."""
    local = (ROOT / "docs" / "local.md").read_text()
    start = local.index("| Option | Default | |")
    table = local[start : local.index("\n\n", start)]
    documented = set(re.findall(r"`(-{1,2}[a-z][a-z-]*)", table))
    offered = _options(_subcommands()["test"])
    assert documented == offered, (
        f"in --help only: {sorted(offered - documented)}; in docs/local.md only: "
        f"{sorted(documented - offered)}"
    )


USER_DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])


@pytest.mark.parametrize("doc", USER_DOCS, ids=lambda p: p.name)
def test_every_command_line_the_docs_give_is_one_the_cli_takes(doc: Path) -> None:
    """Each ``rollout-sdk COMMAND ... --option`` a document shows (in a code block or inline
    code) names a command ``rollout-sdk --help`` lists and options that command's ``--help``
    has, so a renamed or removed flag cannot linger in the docs."""
    commands = _subcommands()
    text = doc.read_text().replace("\\\n", " ")
    lines = re.findall(r"^\s*(?:\.venv/bin/)?rollout-sdk (.+)$", text, re.M)
    lines += re.findall(r"`(?:\.venv/bin/)?rollout-sdk ([^`]+)`", text)
    wrong: list[str] = []
    for line in lines:
        words = line.split("#")[0].split()
        if words[:1] == ["--debug"]:
            words = words[1:]  # rollout-sdk's own option, before the command
        if not words or not re.fullmatch(r"[a-z][a-z-]*", words[0]):
            continue  # "rollout-sdk --help", "rollout-sdk[mcp]", prose
        name = words[0]
        if name not in commands:
            wrong.append(f"no command {name!r}: {line.strip()}")
            continue
        offered = _options(commands[name])
        for word in words[1:]:
            flag = word.split("=", 1)[0]
            if re.fullmatch(r"-{1,2}[a-z][a-z-]*", flag) and flag not in offered:
                wrong.append(f"{name} has no {flag}: {line.strip()}")
    assert not wrong, "; ".join(wrong)
