"""Old import paths of modules that moved, kept working by one import hook.

When a package's modules move into subpackages, users' ``import toolkit.jobs.store``,
``from toolkit.jobs.store import JobStore`` and ``toolkit.jobs.store`` (as an attribute)
must still work. A package lists ``{old name: new module}`` once with
:func:`moved_modules`; a finder on ``sys.meta_path`` then answers an import of an old
path with the module object at its new path, registered under both names, so patching
one patches the other. Nothing is copied and nothing runs twice.

Example:
    >>> import toolkit.jobs.store, toolkit.jobs.storage.store
    >>> toolkit.jobs.store is toolkit.jobs.storage.store
    True
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["moved_modules"]


class _MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``package.old`` as the module at its new path (one instance, one table for every package)."""

    def __init__(self) -> None:
        self.table: dict[str, str] = {}
        self.specs: dict[str, importlib.machinery.ModuleSpec | None] = {}

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.table:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = importlib.import_module(self.table[spec.name])
        self.specs[module.__name__] = module.__spec__
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing runs (the module ran once, at its new path); only its own ``__spec__`` is put back.

        The import system keeps the module's ``__name__``, ``__file__`` and ``__loader__``, but sets
        ``__spec__`` to the old path's.
        """
        module.__spec__ = self.specs[module.__name__]


_FINDER = _MovedFinder()


def moved_modules(package: str, moved: Mapping[str, str]) -> Callable[[str], Any]:
    """Keeps ``package.<old>`` importable for each ``{old: "new.module.path"}``; returns the package's ``__getattr__``.

    Assign the result in the package (``__getattr__ = moved_modules(__name__, {...})``) so that
    ``package.old`` also works as an attribute before anything imported it.
    """
    table = {f"{package}.{old}": new for old, new in moved.items()}
    _FINDER.table.update(table)
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)  # first: a stale file left at an old path must not shadow the new module

    def __getattr__(name: str) -> Any:
        if f"{package}.{name}" in table:
            return importlib.import_module(f"{package}.{name}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
