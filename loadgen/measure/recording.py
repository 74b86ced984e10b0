"""Recording a finished request's values into a group's histograms: one call per group, in C where it is built.

A worker records every finished request into its (variant, mix) group, and into its slices and classes: a few
latencies each (`fates.latencies` gives them, and which its fate censors: Python decides) and, per stream, one ITL
and one ICL sample per chunk gap. `record_values` adds them all in one call — in C (`_record.c`: each value's bucket
added in place in the histogram's counts window, the gaps without a dict of counts) where it is built, else
`record_values_python`, the same by `LatencyHistogram.record` and `record_chunk_gaps`. Both give identical
histograms on every input (tests/unit/test_record_values.py). LOADGEN_PURE_PYTHON=1 at import switches the C off
(the choice is made once per process: this runs per request).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from loadgen.measure.chunk_gaps import _SUB_HALF_MAG, record_chunk_gaps
from loadgen.measure.hdr_layout import DIGITS, HIGHEST_US, LOWEST_US
from loadgen.measure.histogram import LatencyHistogram
from loadgen.pure_python import pure_python

__all__ = ["native_record_available", "record_values", "record_values_python"]

try:  # optional, as every C half is
    from loadgen.measure import _record as _native
except ImportError:  # pragma: no cover - a build without a C compiler
    _native = None  # type: ignore[assignment]  # (a C build may be absent)


def record_values_python(
    hists: Mapping[str, LatencyHistogram],
    make: Callable[[str], LatencyHistogram],
    names: tuple[str, ...],
    values: tuple[float | None, ...],
    times: Sequence[float] | None = None,
    tokens: Sequence[int] = (),
) -> None:
    """Each value that is not None into `hists[name]` (`make(name)` creates it), in order; then, when `times` holds
    two chunk times or more, its chunk gaps into hists "itl" and "icl" (`record_chunk_gaps`)."""
    for name, value in zip(names, values, strict=True):
        if value is not None:
            (hists.get(name) or make(name)).record(value)
    if times is not None and len(times) > 1:
        record_chunk_gaps(hists.get("itl") or make("itl"), hists.get("icl") or make("icl"), times, tokens)


def native_record_available() -> bool:
    """Whether the C recording is built and was not switched off (LOADGEN_PURE_PYTHON=1) when this module loaded."""
    return _native is not None and record_values is not record_values_python


if _native is not None:
    _native.configure(
        LatencyHistogram, (LOWEST_US, HIGHEST_US, DIGITS), 0, _SUB_HALF_MAG, HIGHEST_US, record_chunk_gaps
    )

if _native is not None and not pure_python():
    record_values: Callable[..., None] = _native.record
else:
    record_values = record_values_python
