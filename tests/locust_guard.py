"""The tiers that time nothing run under pytest-xdist (scripts/test). A test that imports Locust in the pytest process
monkey-patches the worker's threads, and the worker later dies waiting for its next test (gevent's LoopExit, an
internal error that fails the tier far from its cause). Tests that need Locust run their check in a fresh interpreter
(tests/fresh_interpreter.py); this names the test that did not."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _locust_stays_out_of_this_process() -> Iterator[None]:
    yield
    assert "locust" not in sys.modules, (
        "this test imported Locust into the pytest process (it monkey-patches the xdist worker's threads): "
        "run its check with tests.fresh_interpreter.run_fresh"
    )
