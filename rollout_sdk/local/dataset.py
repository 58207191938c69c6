"""Datasets of ``rollout-sdk demo`` and ``rollout-sdk test``: v1's formats (.jsonl, .csv,
.parquet) and two shapes of row.

A v1 row has the columns ``system_prompt``, ``user_prompt`` and ``ground_truth`` (any case, each a
non-empty string); every other column is carried into the rollout's metadata under its own name.
It becomes a rollout the way v1's ``osmosis test`` made one: the system and the user message,
and the metadata ``{"ground_truth": ..., "row_index": N, <other columns>, "execution_mode":
"test", "test_mode": true}``, where N counts rows from 0 in the file (``--offset`` included).
A row with ``messages`` (a non-empty list of message objects, the demo's dataset) is the
initial conversation as it stands, its optional ``metadata`` object the rollout's metadata, with
``row_index`` added.

Parquet is read with pyarrow, the optional extra ``parquet``. Every error is a
:class:`~rollout_sdk.errors.DatasetError` naming the file, the row (and the line of a .jsonl or
.csv file), the column, and what to change.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollout_sdk.errors import DatasetError
from rollout_sdk.project import install_hint

REQUIRED_COLUMNS = ("system_prompt", "user_prompt", "ground_truth")
FORMATS = (".jsonl", ".csv", ".parquet")
#: What v1 put in every test rollout's metadata beside the row's own columns.
TEST_METADATA: dict[str, Any] = {"execution_mode": "test", "test_mode": True}


@dataclass(frozen=True)
class RunRow:
    """One rollout to run: its row index, initial conversation and metadata."""

    row_index: int
    messages: list[dict[str, Any]]
    metadata: dict[str, Any]


@dataclass(frozen=True)
class Selection:
    """The rows picked by ``--offset`` and ``--limit`` and how many the file holds."""

    rows: list[RunRow]
    total: int


def _jsonable(value: Any) -> Any:
    """``value`` as JSON can carry it: parquet gives dates, decimals and bytes, which become
    strings; NaN (pandas' missing value) becomes null."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def _json_kind(value: Any) -> str:
    """What JSON calls ``value``'s type (a row's file is JSON, not Python)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return type(value).__name__


def _not_utf8(path: Path, exc: UnicodeDecodeError) -> DatasetError:
    """The error of a file that is not UTF-8, naming the first line that is not."""
    with path.open("rb") as raw:
        head = raw.read(2)
        raw.seek(0)
        if head in (b"\xff\xfe", b"\xfe\xff"):
            return DatasetError(
                f"{path}: UTF-16 text, not UTF-8; save it as UTF-8 (in Excel: CSV UTF-8)"
            )
        for lineno, line in enumerate(raw, start=1):
            try:
                line.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as bad:
                return DatasetError(
                    f"{path}, line {lineno}: not UTF-8 text (byte 0x{line[bad.start]:02x} at "
                    f"position {bad.start + 1}); save the file as UTF-8"
                )
    return DatasetError(f"{path}: not UTF-8 text ({exc.reason}); save the file as UTF-8")


def _jsonl_rows(path: Path, handle: Iterator[str]) -> Iterator[tuple[str, Any]]:
    for lineno, line in enumerate(handle, start=1):
        if not line.strip():
            continue
        try:
            yield f"line {lineno}", json.loads(line)
        except json.JSONDecodeError as exc:
            raise DatasetError(
                f"{path}, line {lineno}: not valid JSON ({exc.msg} at column {exc.colno}); "
                "each line must be one JSON object, e.g. "
                '{"system_prompt": "...", "user_prompt": "...", "ground_truth": "..."}'
            ) from exc


def _csv_rows(path: Path, handle: Iterator[str]) -> Iterator[tuple[str, Any]]:
    reader = csv.DictReader(handle)
    try:
        header = reader.fieldnames
        if header is None:
            raise DatasetError(
                f"{path}: empty, not even a header line; its first line must name the columns: "
                + ",".join(REQUIRED_COLUMNS)
            )
        by_lower = {name.lower(): name for name in header}
        missing = [c for c in REQUIRED_COLUMNS if c not in by_lower]
        if missing and "messages" not in by_lower:
            raise DatasetError(
                f"{path}, line 1 (the header): {_no_columns(missing)} (the header has "
                f"{_listed(header)}); name the columns {', '.join(REQUIRED_COLUMNS)} (any case; "
                "other columns go into the metadata)"
            )
        required = [by_lower[c] for c in REQUIRED_COLUMNS if c in by_lower]
        for row in reader:
            if None in row:
                raise DatasetError(
                    f"{path}, line {reader.line_num}: more fields than the header has "
                    "columns; quote fields that contain commas"
                )
            short = [name for name in required if row[name] is None]
            if short:
                raise DatasetError(
                    f"{path}, line {reader.line_num}: fewer fields than the header's "
                    f"{len(header)} columns (no {short[0]!r}); give each line a field for "
                    "every column, quoting fields that contain commas or line breaks"
                )
            yield f"line {reader.line_num}", row
    except csv.Error as exc:
        raise DatasetError(
            f"{path}, line {reader.line_num}: not valid CSV ({exc}); save it as plain "
            "comma-separated UTF-8 text"
        ) from exc


def _no_columns(missing: list[str]) -> str:
    """``no column 'a'`` or ``no columns 'a', 'b'``."""
    return f"no column{'s' if len(missing) > 1 else ''} {_listed(missing)}"


def _listed(names: Any, most: int = 8) -> str:
    """``names`` as a short list for a message: ``'a', 'b'`` (``none`` when empty)."""
    shown = [repr(str(n)) for n in list(names)[:most]]
    if len(names) > most:
        shown.append(f"... ({len(names)} in all)")
    return ", ".join(shown) or "none"


def _raw_rows(path: Path) -> Iterator[tuple[str, Any]]:
    """(where, row) for each row of the file, ``where`` naming its line when it has one."""
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        yield from _parquet_rows(path)
        return
    try:
        # utf-8-sig: a byte-order mark (Excel's "CSV UTF-8" writes one) is no part of the header.
        handle = path.open(encoding="utf-8-sig", newline="")
    except OSError as exc:
        raise DatasetError(
            f"{path}: cannot read it ({exc.strerror or exc}); check the path and its permissions"
        ) from exc
    with handle:
        try:
            yield from (_jsonl_rows if suffix == ".jsonl" else _csv_rows)(path, handle)
        except UnicodeDecodeError as exc:
            raise _not_utf8(path, exc) from exc


def _parquet_rows(path: Path) -> Iterator[tuple[str, Any]]:
    try:
        # Here: pyarrow is the optional parquet extra, and only .parquet datasets need it.
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise DatasetError(
            f"{path}: reading .parquet needs pyarrow, which is in the optional extra: "
            f"{install_hint('parquet')} (or use a .jsonl or .csv dataset)"
        ) from exc
    try:
        table = pq.read_table(path)
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise DatasetError(
            f"{path}: not a readable parquet file ({' '.join(str(exc).split())}); write it "
            "with pandas' to_parquet or pyarrow, or give a .jsonl or .csv dataset"
        ) from exc
    for row in table.to_pylist():
        yield "", row


def _conversation_row(at: str, row_index: int, row: dict[str, Any]) -> RunRow:
    """A row that gives its ``messages`` (and ``metadata``) as they are."""
    messages = row["messages"]
    if not isinstance(messages, list) or not messages:
        raise DatasetError(f"{at}: 'messages' must be a non-empty list of message objects")
    if not all(isinstance(m, dict) for m in messages):
        raise DatasetError(f"{at}: 'messages' must be a non-empty list of message objects")
    metadata = row.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise DatasetError(f"{at}: 'metadata' must be an object when present")
    return RunRow(row_index, messages, {**metadata, "row_index": row_index})


def _row(path: Path, where: str, row_index: int, row: Any) -> RunRow:
    at = f"{path}, row {row_index}" + (f" ({where})" if where else "")
    if not isinstance(row, dict):
        raise DatasetError(
            f"{at}: a row must be an object with columns, got {_json_kind(row)}; write it as "
            '{"system_prompt": "...", "user_prompt": "...", "ground_truth": "..."}'
        )
    if "messages" in row:
        return _conversation_row(at, row_index, row)
    by_lower = {str(k).lower(): k for k in row}
    values: dict[str, str] = {}
    missing = [column for column in REQUIRED_COLUMNS if column not in by_lower]
    if missing:
        raise DatasetError(
            f"{at}: {_no_columns(missing)} (the row has {_listed(row)}); every row needs "
            f"{', '.join(REQUIRED_COLUMNS)} (any case; other columns go into the metadata), "
            "or 'messages'"
        )
    for column in REQUIRED_COLUMNS:
        value = row[by_lower[column]]
        if value is None:
            raise DatasetError(f"{at}: column {column!r} is null; give it a non-empty string")
        if not isinstance(value, str):
            raise DatasetError(
                f"{at}: column {column!r} must be a string, got {_json_kind(value)}; "
                f"write it as text, e.g. {json.dumps(str(value))}"
            )
        if not value.strip():
            raise DatasetError(f"{at}: column {column!r} is empty; give it a non-empty string")
        values[column] = value
    metadata: dict[str, Any] = {"ground_truth": values["ground_truth"], "row_index": row_index}
    for key, value in row.items():
        if str(key).lower() not in REQUIRED_COLUMNS:
            metadata[str(key)] = _jsonable(value)
    metadata.update(TEST_METADATA)
    return RunRow(
        row_index=row_index,
        messages=[
            {"role": "system", "content": values["system_prompt"]},
            {"role": "user", "content": values["user_prompt"]},
        ],
        metadata=metadata,
    )


#: What an empty dataset of each format is told (the path first).
_EMPTY = {
    ".jsonl": "no rows (the file is empty, or blank lines only); write one JSON object per line "
    "with the columns " + ", ".join(REQUIRED_COLUMNS),
    ".csv": "a header and no rows; add a line under the header for each row",
    ".parquet": "the table has no rows; write it with a row for each rollout",
}


def read_rows(path: str | Path, *, limit: int | None = None, offset: int = 0) -> Selection:
    """The rows ``offset`` to ``offset + limit`` of a .jsonl, .csv or .parquet dataset (only
    those are checked, as in v1), and the number of rows in the file.

    Raises DatasetError for a missing, unreadable or empty file, a folder, an unknown format, or
    a bad row.
    """
    path = Path(path)
    if path.is_dir():
        raise DatasetError(
            f"{path}: a folder, not a file; give --dataset the .jsonl, .csv or .parquet file itself"
        )
    if path.suffix.lower() not in FORMATS:
        raise DatasetError(
            f"{path}: unknown dataset format {path.suffix or '(no suffix)'!r}; use "
            ".jsonl, .csv or .parquet (the suffix picks the reader)"
        )
    if not path.exists():
        raise DatasetError(
            f"dataset {path} not found (current folder: {Path.cwd()}); check the path "
            "given to --dataset"
        )
    rows: list[RunRow] = []
    total = 0
    for index, (where, raw) in enumerate(_raw_rows(path)):
        total += 1
        if index >= offset and (limit is None or len(rows) < limit):
            rows.append(_row(path, where, index, raw))
    if not total:
        raise DatasetError(f"{path}: {_EMPTY[path.suffix.lower()]}")
    return Selection(rows=rows, total=total)
