"""Whether LOADGEN_PURE_PYTHON switches the C halves off, read afresh at every call (a test may set it at any time):
the one place every C half asks (protocol/native.py, measure/hist_merge.py, hist_walk.py, recording.py; the last
and client/connection.py bind their C call once, at import, where a check per request would cost more than it
saves).

`os.environ.get` costs a Mapping lookup, a key encode and a try/except (~1.5 µs), and the master's merge asks once per
histogram merged (~2,000 times a 3-s interval at 1,000 workers). The environment's own dict, which `os.environ`'s
setters keep in step (`monkeypatch.setenv`, `del os.environ[...]`), answers the same in one lookup; where there is no
such dict, the public call.
"""

from __future__ import annotations

import os

__all__ = ["pure_python"]

_DATA: object = getattr(os.environ, "_data", None)
_KEY: object = os.environ.encodekey("LOADGEN_PURE_PYTHON") if isinstance(_DATA, dict) else None


def pure_python() -> bool:
    """LOADGEN_PURE_PYTHON is set and not empty: `bool(os.environ.get("LOADGEN_PURE_PYTHON"))`."""
    data = _DATA
    if isinstance(data, dict):
        return bool(data.get(_KEY))
    return bool(os.environ.get("LOADGEN_PURE_PYTHON"))
