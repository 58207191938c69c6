"""Build botocore's endpoint data for the kit's own clients, trimmed to the services they call.

Run by the Makefile's build-DependenciesLayer, from the botocore the build installed (the
version constraints.txt pins, the Lambda runtime's as the kit models it; the layer then drops
botocore itself, which the runtime provides):

    python infra/botocore_data.py LAYER/python/botocore LAYER/botocore-data

botocore parses its ``endpoints.json`` (1.2 MB: every service in every partition) when a
session builds its first client, to find each client's region and signing details; the kit's
clients call six services (``rollout_sdk.aws.clients.Service``). The output is that file with
each partition's ``services`` cut to those six, everything else (the partitions, their regions
and defaults) as it was, plus ``BOTOCORE_VERSION`` naming the botocore it came from.
:class:`rollout_sdk.aws.clients.AwsClients` puts the folder first on its own session's data path
(never on the process's: an agent's own boto3 clients keep every service) only when the running
botocore is that version, so a runtime with another botocore reads its own data.

Why by hand: botocore has no way to load part of its endpoint data (its loader reads a file
whole), and a data path that shadows a file is its documented extension point
(``AWS_DATA_PATH``, the session's ``data_path``).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any, get_args

#: The trimmed file, as botocore's loader finds it on a data path.
ENDPOINTS = "endpoints.json"
#: The botocore version the data was built from.
VERSION_FILE = "BOTOCORE_VERSION"


def kit_services() -> tuple[str, ...]:
    """The services the kit's clients call (one list: ``rollout_sdk.aws.clients.Service``)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from rollout_sdk.aws.clients import Service

    return tuple(get_args(Service))


def trimmed(endpoints: dict[str, Any], services: tuple[str, ...]) -> dict[str, Any]:
    """``endpoints`` with each partition's ``services`` cut to ``services``; KeyError when a
    service is in no partition (a name botocore does not know)."""
    found: set[str] = set()
    partitions = []
    for partition in endpoints["partitions"]:
        kept = {
            name: partition["services"][name] for name in services if name in partition["services"]
        }
        found.update(kept)
        partitions.append({**partition, "services": kept})
    missing = sorted(set(services) - found)
    if missing:
        raise KeyError(f"botocore's endpoint data has no service {', '.join(missing)}")
    return {**endpoints, "partitions": partitions}


def botocore_version(botocore_dir: Path) -> str:
    """``__version__`` of the botocore package in ``botocore_dir`` (read, not imported: it is
    the Lambda runtime's, not this Python's)."""
    text = (botocore_dir / "__init__.py").read_text(encoding="utf-8")
    match = re.search(r"^__version__ = ['\"]([^'\"]+)['\"]", text, re.MULTILINE)
    if match is None:
        raise ValueError(f"{botocore_dir}/__init__.py names no __version__")
    return match.group(1)


def build(botocore_dir: Path, out: Path, services: tuple[str, ...]) -> tuple[int, int]:
    """Write the trimmed data into ``out``; the endpoint file's bytes before and after."""
    source = botocore_dir / "data" / ENDPOINTS
    endpoints = json.loads(source.read_text(encoding="utf-8"))
    out.mkdir(parents=True, exist_ok=True)
    text = json.dumps(trimmed(endpoints, services), separators=(",", ":"))
    (out / ENDPOINTS).write_text(text, encoding="utf-8")
    (out / VERSION_FILE).write_text(botocore_version(botocore_dir) + "\n", encoding="utf-8")
    return source.stat().st_size, len(text)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    botocore_dir, out = Path(argv[0]), Path(argv[1])
    if not (botocore_dir / "data" / ENDPOINTS).is_file():
        print(f"{botocore_dir}: no botocore with its data here", file=sys.stderr)
        return 2
    before, after = build(botocore_dir, out, kit_services())
    print(f"botocore {botocore_version(botocore_dir)}: {ENDPOINTS} {before:,} -> {after:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
