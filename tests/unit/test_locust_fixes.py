"""The Locust work-arounds: the cached option defaults are Locust's own, computed once, and never shared.

Each check runs in a fresh interpreter (tests/fresh_interpreter.py): importing Locust patches the whole process."""

from __future__ import annotations

from tests.fresh_interpreter import run_fresh

_CACHED_DEFAULTS = """
import json
from locust import argument_parser
from loadgen.locust_plugin import locust_fixes

calls = []

def locusts():  # Locust's own, uncached, counted
    calls.append(1)
    return {"users": 1, "spawn_rate": 1.0, "host": None}

argument_parser.default_args_dict = locusts
locust_fixes.cache_default_args()
locust_fixes.cache_default_args()  # idempotent: wraps once
cached = argument_parser.default_args_dict
# What a worker's spawn handling does: one call per option of the master's (~60).
all_have_users = all("users" in cached() for _ in range(60))
mine = cached()
mine["users"] = -1  # a caller that changes its copy changes nobody else's
print(json.dumps({
    "wrapped": cached is not locusts and getattr(cached, "loadgen_cached", False),
    "all_have_users": all_have_users,
    "calls": len(calls),
    "equal": cached() == locusts(),
    "users_after_a_caller_changed_its_copy": cached()["users"],
}))
"""


def test_default_args_are_computed_once_and_equal_to_locusts() -> None:
    out = run_fresh(_CACHED_DEFAULTS)
    assert out["wrapped"] is True and out["all_have_users"] is True
    assert out["calls"] == 1
    assert out["equal"] is True
    assert out["users_after_a_caller_changed_its_copy"] == 1


_PLUGIN_INSTALLS = """
import json
from locust import argument_parser
from loadgen.locust_plugin.plugin import register

before = getattr(argument_parser.default_args_dict, "loadgen_cached", False)
register()
print(json.dumps({"before": before, "after": getattr(argument_parser.default_args_dict, "loadgen_cached", False)}))
"""


def test_the_plugin_installs_it() -> None:
    assert run_fresh(_PLUGIN_INSTALLS) == {"before": False, "after": True}


# Runner.stop()'s caller lookup, as locust/runners.py makes it, counted in `inspect.getabsfile` calls: the first
# lookup in a process maps the file of every loaded module; that is the stall the warm-up moves to start-up.
_STOP_LOOKUP = """
import inspect, json, sys
import locust.runners  # noqa: F401  (Locust and what a run imports: ~1,000 modules)
import loadgen.locust_plugin.plugin  # noqa: F401
from loadgen.locust_plugin import locust_fixes

if sys.argv[1:] == ["warm"]:
    locust_fixes.warm_stop_caller_lookup()
calls = []
real = inspect.getabsfile

def counted(*args, **kwargs):
    calls.append(1)
    return real(*args, **kwargs)

inspect.getabsfile = counted

def stop():  # what Runner.stop() does first
    return inspect.getframeinfo(inspect.stack()[1][0])

stop()
print(json.dumps({"modules": len(sys.modules), "files_mapped": len(calls)}))
"""


def test_the_stop_caller_lookup_maps_no_module_files_once_warmed() -> None:
    cold = run_fresh(_STOP_LOOKUP.replace("sys.argv[1:]", '["cold"]'))
    warm = run_fresh(_STOP_LOOKUP.replace("sys.argv[1:]", '["warm"]'))
    # Cold, the lookup maps every loaded module (the control: what the warm-up must remove; 959 of 984 here); warm,
    # only the frames on the stack whose file no module names (this check's `-c` script: 9 here).
    assert cold["files_mapped"] > cold["modules"] / 2 > 200
    assert warm["files_mapped"] <= 20, warm


_MECHANICS = """
import json
from loadgen.locust_plugin.locust_fixes import POLL_S, QuickPolls

slept = []

class Module:
    answer = 42

    @staticmethod
    def sleep(seconds=0):
        slept.append(seconds)

def waits_for_workers(m):  # stands in for one of Locust's one-second loops
    m.sleep(1)

def heartbeat(m):
    m.sleep(1)

shim = QuickPolls(Module, [waits_for_workers.__code__])
waits_for_workers(shim)
heartbeat(shim)
waits_for_workers(shim)
shim.sleep(0)  # a zero sleep (a yield) stays one
print(json.dumps({"slept": slept, "poll": POLL_S, "answer": shim.answer}))
"""


def test_quick_polls_shorten_only_the_named_callers_sleeps() -> None:
    out = run_fresh(_MECHANICS)
    poll = out["poll"]
    assert 0 < poll < 1 and out["slept"] == [poll, 1, poll, 0]
    assert out["answer"] == 42  # everything else is the module's own


_QUICKENED = """
import json
import gevent, time
from locust import main, runners
from loadgen.locust_plugin import locust_fixes

locust_fixes.install()
locust_fixes.install()  # idempotent: one stand-in, not one around another
g = runners.gevent
print(json.dumps({
    "runners_shim": isinstance(g, locust_fixes.QuickPolls) and g.module is gevent,
    "stop_is_the_masters": g.callers == {runners.MasterRunner.stop.__code__},
    # The loop aimed at: the stop waits on user_count, with a sleep.
    "stop_loop": {"user_count", "sleep"} <= set(runners.MasterRunner.stop.__code__.co_names),
    "delegates": g.spawn is gevent.spawn and g.Timeout is gevent.Timeout,
    # The start's wait for the workers is Locust's own (a 2.35 worker is ready before its init has run).
    "start_untouched": main.time is time,
}))
"""


def test_the_plugin_quickens_exactly_the_masters_stop_poll() -> None:
    out = run_fresh(_QUICKENED)
    assert out == dict.fromkeys(out, True) and len(out) == 5, out
