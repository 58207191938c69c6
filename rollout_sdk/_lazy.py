"""Lazy package exports (PEP 562): a name is imported from its module on first access.

A package's ``__init__`` maps each public name to the module that defines it and installs the
``__getattr__`` and ``__dir__`` made here; type checkers see the real imports, which the package
writes under ``TYPE_CHECKING``. So importing the package costs nothing beyond what the names a
caller actually uses need (``tests/unit/test_imports.py`` holds the agent author's import to that).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping


def lazy_exports(
    package: str, modules: Mapping[str, Iterable[str]]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``, which exports the names ``modules`` lists
    under each module. An unknown name raises AttributeError, as for any module.

    ``__getattr__`` is typed to return ``object``: type checkers read the real names from the
    package's ``TYPE_CHECKING`` imports, and a misspelt one comes out unusable, not ``Any``.
    """
    exports = {name: module for module, names in modules.items() for name in names}

    def __getattr__(name: str) -> object:
        module_name = exports.get(name)
        if module_name is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value: object = getattr(importlib.import_module(module_name), name)
        # Kept in the package, so the next access is an ordinary attribute lookup.
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__
