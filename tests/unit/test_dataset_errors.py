"""A bad dataset, through the CLI as a newcomer meets it: one line on stderr naming the file, the
row or line where it applies, what is wrong and what to do; exit status 1 (the run cannot
start); no traceback, unless ``rollout-sdk --debug`` (or ``test --debug``) asks for one."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from rollout_sdk.local import report
from rollout_sdk.local.cli import main

pytestmark = pytest.mark.timeout(60)

AGENT = "examples.calculator.agent:agent_loop"
ROW = {"system_prompt": "Be brief.", "user_prompt": "What is 1 + 1?", "ground_truth": "2"}
EXAMPLE = '{"system_prompt": "...", "user_prompt": "...", "ground_truth": "..."}'


def _jsonl(*lines: object) -> bytes:
    return "".join(
        (line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines
    ).encode()


def _folder(path: Path) -> None:
    path.mkdir()


def _parquet(path: Path) -> None:
    path.write_bytes(b"PAR1 not really parquet")


#: (file name, what it holds (bytes, or what makes it), what its one line must say).
CASES: list[tuple[str, bytes | Callable[[Path], None] | None, list[str]]] = [
    ("missing.jsonl", None, ["dataset {path} not found", "check the path given to --dataset"]),
    ("empty.jsonl", b"", ["{path}: no rows", "write one JSON object per line"]),
    ("blank.jsonl", b"\n  \n", ["{path}: no rows (the file is empty, or blank lines only)"]),
    (
        "bad.jsonl",
        _jsonl(ROW, '{"system_prompt": "s",'),
        ["{path}, line 2: not valid JSON", "each line must be one JSON object, e.g. " + EXAMPLE],
    ),
    (
        "array.jsonl",
        _jsonl(ROW, ["not", "an", "object"]),
        ["{path}, row 1 (line 2): a row must be an object", "got an array", EXAMPLE],
    ),
    (
        "columns.jsonl",
        _jsonl({"system_prompt": "s", "user": "u"}),
        [
            "{path}, row 0 (line 1): no columns 'user_prompt', 'ground_truth'",
            "(the row has 'system_prompt', 'user')",
            "every row needs system_prompt, user_prompt, ground_truth (any case",
        ],
    ),
    (
        "blank_value.jsonl",
        _jsonl(ROW, {**ROW, "user_prompt": "  "}),
        ["{path}, row 1 (line 2): column 'user_prompt' is empty; give it a non-empty string"],
    ),
    (
        "null.jsonl",
        _jsonl({**ROW, "ground_truth": None}),
        ["{path}, row 0 (line 1): column 'ground_truth' is null; give it a non-empty string"],
    ),
    (
        "number.jsonl",
        _jsonl({**ROW, "ground_truth": 47}),
        ["column 'ground_truth' must be a string, got a number", 'e.g. "47"'],
    ),
    (
        "header.csv",
        b"sys,user_prompt,truth\na,b,c\n",
        [
            "{path}, line 1 (the header): no columns 'system_prompt', 'ground_truth'",
            "(the header has 'sys', 'user_prompt', 'truth')",
            "name the columns system_prompt, user_prompt, ground_truth",
        ],
    ),
    ("nothing.csv", b"", ["{path}: empty, not even a header line"]),
    ("header_only.csv", b"system_prompt,user_prompt,ground_truth\n", ["{path}: a header and no"]),
    (
        "short.csv",
        b"system_prompt,user_prompt,ground_truth\na,b\n",
        ["{path}, line 2: fewer fields than the header's 3 columns (no 'ground_truth')"],
    ),
    (
        "long.csv",
        b"system_prompt,user_prompt,ground_truth\na,b,c,d\n",
        ["{path}, line 2: more fields than the header", "quote fields that contain commas"],
    ),
    ("data.txt", b"hello\n", ["{path}: unknown dataset format '.txt'; use .jsonl, .csv or"]),
    ("rows.jsonl", _folder, ["{path}: a folder, not a file; give --dataset the .jsonl"]),
    (
        "latin1.jsonl",
        _jsonl(ROW) + b'{"system_prompt": "caf\xe9"}\n',
        ["{path}, line 2: not UTF-8 text (byte 0xe9 at position 23); save the file as UTF-8"],
    ),
    (
        "latin1.csv",
        b"system_prompt,user_prompt,ground_truth\ncaf\xe9,b,c\n",
        ["{path}, line 2: not UTF-8 text (byte 0xe9", "save the file as UTF-8"],
    ),
    ("utf16.csv", "system_prompt\n".encode("utf-16"), ["{path}: UTF-16 text, not UTF-8"]),
    ("broken.parquet", _parquet, ["{path}: not a readable parquet file", "pandas' to_parquet"]),
]
IDS = [case[0] for case in CASES]


def _make(tmp_path: Path, name: str, content: bytes | Callable[[Path], None] | None) -> Path:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        content(path)
    return path


def _run(command: str, path: Path, *before: str) -> int:
    if command == "test":
        return main([*before, "test", "-m", AGENT, "-d", str(path), "--api-key", "k"])
    return main([*before, "demo", "--dataset", str(path)])


def _one_line(capsys: pytest.CaptureFixture[str], command: str, path: Path, says: list[str]) -> str:
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    (line,) = lines
    assert line.startswith(f"rollout-sdk {command}: error: ")
    assert str(path) in line
    for fragment in says:
        assert fragment.replace("{path}", str(path)) in line, line
    return line


@pytest.fixture(autouse=True)
def _debug_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(report, "DEBUG", False)  # main sets it; put back after each test


@pytest.mark.parametrize("command", ["test", "demo"])
@pytest.mark.parametrize(("name", "content", "says"), CASES, ids=IDS)
def test_a_bad_dataset_is_one_line_with_its_cause_and_fix(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    command: str,
    name: str,
    content: bytes | Callable[[Path], None] | None,
    says: list[str],
) -> None:
    path = _make(tmp_path, name, content)
    assert _run(command, path) == 1
    _one_line(capsys, command, path, says)


@pytest.mark.parametrize("command", ["test", "demo"])
def test_parquet_without_pyarrow_names_the_extra(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    command: str,
) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # as if not installed
    path = _make(tmp_path, "data.parquet", _parquet)
    assert _run(command, path) == 1
    _one_line(
        capsys,
        command,
        path,
        ["needs pyarrow", "pip install -c constraints.txt -e '.[parquet]' in "],
    )


def test_a_byte_order_mark_is_no_part_of_the_header(tmp_path: Path) -> None:
    from rollout_sdk.local.dataset import read_rows

    path = tmp_path / "excel.csv"
    path.write_bytes(b"\xef\xbb\xbfSystem_Prompt,User_Prompt,Ground_Truth\na,b,c\n")
    (row,) = read_rows(path).rows
    assert row.messages[0]["content"] == "a" and row.metadata["ground_truth"] == "c"


def test_an_offset_past_the_end_says_how_many_rows_there_are(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _make(tmp_path, "two.jsonl", _jsonl(ROW, ROW))
    assert main(["test", "-m", AGENT, "-d", str(path), "--api-key", "k", "--offset", "5"]) == 1
    _one_line(capsys, "test", path, ["has 2 rows and --offset is 5; give an --offset below 2"])


@pytest.mark.parametrize(
    "argv",
    [
        ["--debug", "test", "-m", AGENT, "-d", "{path}", "--api-key", "k"],
        ["test", "--debug", "-m", AGENT, "-d", "{path}", "--api-key", "k"],
        ["--debug", "demo", "--dataset", "{path}"],
    ],
    ids=["rollout-sdk --debug test", "test --debug", "rollout-sdk --debug demo"],
)
def test_debug_shows_the_traceback_before_the_same_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    path = _make(tmp_path, "bad.jsonl", _jsonl(["not", "an", "object"]))
    assert main([a.format(path=path) for a in argv]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last)"), err
    assert "rollout_sdk.errors.DatasetError: " in err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"rollout-sdk {argv[1] if argv[0] == '--debug' else argv[0]}: error: ")
    assert f"{path}, row 0 (line 1): a row must be an object" in last
