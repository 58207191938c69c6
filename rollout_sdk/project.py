"""Where the kit's project is, so that its commands work from any folder: the folder that
holds ``rollout_sdk/`` and ``template.yaml`` (a copy of the kit's repository, as users start
from), or none when the kit is installed from a wheel (then the current folder alone counts).

A relative path a command is given (its template, its dataset, an event file) is taken from
the current folder when it is there, else from the project's root; an agent named
``module:attribute`` is imported from the current folder first, then from the root."""

from __future__ import annotations

import os
import sys
from functools import cache
from pathlib import Path


@cache
def project_root() -> Path | None:
    """The project's root, or None (the kit installed on its own). Looked for when first asked
    (never at import: the loader, which Lambda imports, imports this module)."""
    root = Path(__file__).resolve().parent.parent
    return root if (root / "template.yaml").is_file() else None


def project_path(path: str) -> str:
    """``path`` as given when it exists from here (or is absolute, or there is no project),
    else the project's own file of that relative path when there is one."""
    given = Path(path)
    root = project_root()
    if given.is_absolute() or given.exists() or root is None:
        return path
    theirs = root / given
    return str(theirs) if theirs.exists() else path


def importable_from_here() -> None:
    """The current folder first, then the project's root, on ``sys.path`` (as uvicorn puts the
    current folder): an agent beside the project, or the project's own, imports as named."""
    root = project_root()
    for folder in (str(root) if root else None, os.getcwd()):
        if folder is not None and folder not in sys.path:
            sys.path.insert(0, folder)


def install_hint(extra: str) -> str:
    """How to install one of the kit's optional extras, said for where the kit is: in a copy of
    the kit's repository the project itself is installed editable (``make`` does it into
    ``.venv``, with every extra the tests use), so the extra is the project's; installed from a
    wheel, it is the package's."""
    root = project_root()
    if root is None:
        return f"pip install 'rollout-sdk[{extra}]'"
    return f"pip install -c constraints.txt -e '.[{extra}]' in {root}"
