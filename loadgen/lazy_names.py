"""A package's names resolved on first use (PEP 562): `loadgen` and `loadgen.report` hand out their public names
without importing the modules behind them until one is asked for (tests/unit/test_lazy_imports.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(package: str, home: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The package's `__getattr__` and `__dir__`: each name of `home` is its module's own (`home[name]`), imported
    and kept in the package's namespace at its first use; any other name is an AttributeError, as for a module."""
    namespace = import_module(package).__dict__

    def getattr_(name: str) -> Any:
        module = home.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(module), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted({*namespace, *home})

    return getattr_, dir_
