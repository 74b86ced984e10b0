"""The optional C half of the read path (`loadgen/protocol/_wire.c`), imported here and nowhere else.

Built by `pip install` where a C compiler is present; without it (or with LOADGEN_PURE_PYTHON=1) loadgen runs the
same path in Python. Parity tests (tests/unit/test_wire.py) hold the two equal on every input either accepts.
"""

from __future__ import annotations

from loadgen.pure_python import pure_python

__all__ = ["fast_path_available", "wire"]

try:
    from loadgen.protocol import _wire as wire
except ImportError:  # pragma: no cover - a build without a C compiler
    wire = None  # type: ignore[assignment]


def fast_path_available() -> bool:
    """Whether the C half is built and not switched off (LOADGEN_PURE_PYTHON=1)."""
    return wire is not None and not pure_python()
