"""Build botocore's data for the kit's own clients: the services they call, and nothing else.

Run by the Makefile's build-DependenciesLayer, from the botocore the build installed (the
version constraints.txt pins, the Lambda runtime's as the kit models it; the layer then drops
botocore itself, which the runtime provides):

    python infra/botocore_data.py LAYER/python/botocore LAYER/botocore-data

What botocore does with its whole data folder at a session's first clients, measured with
Python 3.13: it parses ``endpoints.json`` (1.2 MB: every service in every partition, about
20 ms) to find each client's region and signing details, and to find a service's model it lists
every one of its 445 service folders, once per kind of file (the model, the endpoint rules:
10 to 15 ms each). The output is a data folder of the kit's services alone
(``rollout_sdk.aws.clients.Service``, and STS, which a session's credential providers may
call): each one's folder as botocore ships it but for its documentation examples, with its
model (``service-2.json``) cut to the operations the kit calls
(``rollout_sdk.aws.clients.OPERATIONS``), the shapes they reach and no documentation strings,
and its paginators and waiters to those operations' (STS is left whole); botocore's top-level
files (retries, partitions, defaults), ``endpoints.json`` with each partition's ``services``
cut to those services (everything else in it as it was), and ``BOTOCORE_VERSION`` naming the
botocore it came from. The cut models are what a client's creation mostly parses and turns
into methods: for the API function's three clients, 60-75 ms on their whole models against
26-36 ms on the cut ones (python3.13, five alternated runs). :class:`rollout_sdk.aws.clients.AwsClients` gives its own
session a loader of that folder alone (never the process's: an agent's own boto3 clients keep
all of botocore's data) only when the running botocore is that version, so a runtime with
another botocore reads its own data.

Why by hand: botocore reads a data file whole and lists every service folder it can see; a
loader over another folder (botocore's ``Loader`` with its own search paths, registered as the
session's ``data_loader``) is its documented extension point, and this script writes that folder.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any, get_args

# The kit's list of services and the name of the version file its clients read: one source.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from rollout_sdk.aws.clients import BOTOCORE_VERSION_FILE as VERSION_FILE
from rollout_sdk.aws.clients import OPERATIONS, Service

#: The trimmed file, as botocore's loader finds it on a data path.
ENDPOINTS = "endpoints.json"
#: What the kit's clients never read of a service's folder: documentation examples.
LEFT_OUT = ("examples-1.json",)
#: Called by botocore's own credential providers (assume-role profiles, web identity), never by
#: the kit: kept so that a session on the folder resolves such credentials as any other.
CREDENTIAL_SERVICES = ("sts",)


def kit_services() -> tuple[str, ...]:
    """The services the kit's clients call (one list: ``rollout_sdk.aws.clients.Service``), and
    :data:`CREDENTIAL_SERVICES`."""
    return (*get_args(Service), *CREDENTIAL_SERVICES)


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


def _reached(shapes: dict[str, Any], roots: list[str]) -> set[str]:
    """The names of ``roots`` and of every shape they refer to, transitively."""
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        shape = shapes[name]
        todo += [shape[key]["shape"] for key in ("member", "key", "value") if key in shape]
        todo += [member["shape"] for member in shape.get("members", {}).values()]
    return seen


def cut_model(model: dict[str, Any], operations: tuple[str, ...]) -> dict[str, Any]:
    """``model`` (a ``service-2.json``) with only ``operations``, the shapes their input,
    output and errors reach, and no documentation strings (a client never reads them);
    KeyError naming an operation the model does not have."""
    missing = sorted(set(operations) - set(model["operations"]))
    if missing:
        raise KeyError(
            f"{model['metadata'].get('serviceId', 'the service')} has no operation "
            f"{', '.join(missing)}"
        )
    kept = {name: dict(model["operations"][name]) for name in operations}
    roots = [
        ref["shape"]
        for operation in kept.values()
        for ref in (operation.get("input"), operation.get("output"), *operation.get("errors", []))
        if ref is not None
    ]
    shapes = {
        name: dict(model["shapes"][name]) for name in sorted(_reached(model["shapes"], roots))
    }
    for item in (*kept.values(), *shapes.values()):
        item.pop("documentation", None)
        if "members" in item:
            item["members"] = {
                name: {k: v for k, v in member.items() if k != "documentation"}
                for name, member in item["members"].items()
            }
    out = {**model, "operations": kept, "shapes": shapes}
    out.pop("documentation", None)
    return out


def _cut_listing(listing: dict[str, Any], key: str, operations: tuple[str, ...]) -> dict[str, Any]:
    """A paginators or waiters file with only the entries of ``operations``."""
    entries = listing.get(key, {})
    kept = {
        name: entry for name, entry in entries.items() if entry.get("operation", name) in operations
    }
    return {**listing, key: kept}


def cut_service(folder: Path, operations: tuple[str, ...]) -> None:
    """Cut a copied service folder (each API version in it) to ``operations``."""
    for model_file in folder.glob("*/service-2.json*"):
        version = model_file.parent
        model = _read(model_file)
        if not set(operations) & set(model["operations"]):
            shutil.rmtree(version)  # an old API version the kit's clients never load
            continue
        _write(model_file, cut_model(model, operations))
        for name, key in (("paginators-1.json", "pagination"), ("waiters-2.json", "waiters")):
            listing = version / name
            if listing.exists():
                _write(listing, _cut_listing(_read(listing), key, operations))


def _read(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    loaded: dict[str, Any] = json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)
    return loaded


def _write(path: Path, value: dict[str, Any]) -> None:
    raw = json.dumps(value, separators=(",", ":")).encode()
    # mtime=0: the same input builds the same bytes (the layer's content hash names its version)
    path.write_bytes(gzip.compress(raw, mtime=0) if path.suffix == ".gz" else raw)


def botocore_version(botocore_dir: Path) -> str:
    """``__version__`` of the botocore package in ``botocore_dir`` (read, not imported: it is
    the Lambda runtime's, not this Python's)."""
    text = (botocore_dir / "__init__.py").read_text(encoding="utf-8")
    match = re.search(r"^__version__ = ['\"]([^'\"]+)['\"]", text, re.MULTILINE)
    if match is None:
        raise ValueError(f"{botocore_dir}/__init__.py names no __version__")
    return match.group(1)


def build(botocore_dir: Path, out: Path, services: tuple[str, ...]) -> tuple[int, int]:
    """Write the data folder of ``services`` into ``out`` (replacing one there); the bytes of
    botocore's data folder and of the new one."""
    data = botocore_dir / "data"
    endpoints = json.loads((data / ENDPOINTS).read_text(encoding="utf-8"))
    cut = trimmed(endpoints, services)  # KeyError before anything is written
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for top in data.iterdir():
        if top.is_file() and top.name != ENDPOINTS:
            shutil.copy2(top, out / top.name)
    (out / ENDPOINTS).write_text(json.dumps(cut, separators=(",", ":")), encoding="utf-8")
    for service in services:
        shutil.copytree(data / service, out / service, ignore=shutil.ignore_patterns(*LEFT_OUT))
        if service in OPERATIONS:
            cut_service(out / service, OPERATIONS[service])  # type: ignore[index]
    (out / VERSION_FILE).write_text(botocore_version(botocore_dir) + "\n", encoding="utf-8")
    return _bytes(data), _bytes(out)


def _bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    botocore_dir, out = Path(argv[0]), Path(argv[1])
    if not (botocore_dir / "data" / ENDPOINTS).is_file():
        print(f"{botocore_dir}: no botocore with its data here", file=sys.stderr)
        return 2
    services = kit_services()
    before, after = build(botocore_dir, out, services)
    print(
        f"botocore {botocore_version(botocore_dir)}: data of {', '.join(services)}: "
        f"{after:,} bytes (botocore's whole data: {before:,})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
