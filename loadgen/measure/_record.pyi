"""Types of loadgen.measure._record, a finished request's values recorded into its histograms in one call
(loadgen/measure/_record.c; loadgen/measure/recording.py has the Python equal)."""

from collections.abc import Callable, Mapping, Sequence
from typing import Any

def configure(
    hist_type: type,
    layout_key: tuple[int, int, int],
    unit: int,
    half: int,
    highest: int,
    gaps_python: Callable[..., None],
) -> None: ...
def record(
    hists: Mapping[str, Any],
    make: Callable[[str], Any],
    names: tuple[str, ...],
    values: tuple[float | None, ...],
    times: Sequence[float] | None = None,
    tokens: Sequence[int] = (),
) -> None: ...
def gaps(itl: Any, icl: Any, times: Sequence[float], tokens: Sequence[int]) -> None: ...
