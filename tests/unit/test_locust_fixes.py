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

def waits_for_workers(m):  # stands in for one of Locust's one-second loops (its own loop looks again)
    m.sleep(1)

def heartbeat(m):
    m.sleep(1)

def final_reports(m, pending):  # stands in for the quit's half second: over once nothing is pending
    m.sleep(0.5)

def nothing_pending(frame):
    pending = frame.f_locals["pending"]
    pending.pop()  # one "report" comes in per look
    return not pending

shim = QuickPolls(Module, {waits_for_workers.__code__: None, final_reports.__code__: nothing_pending})
waits_for_workers(shim)
heartbeat(shim)
waits_for_workers(shim)
shim.sleep(0)  # a zero sleep (a yield) stays one
out = {"poll": POLL_S, "answer": shim.answer, "slept": list(slept)}
slept.clear()
final_reports(shim, [1, 2, 3])  # the third look finds nothing pending: two sleeps of one step
out["until_done"] = list(slept)
slept.clear()
final_reports(shim, list(range(10**6)))  # never done: it sleeps (about) the time asked for, in steps
out["never_done"] = slept
print(json.dumps(out))
"""


def test_quick_polls_shorten_only_the_named_callers_sleeps() -> None:
    out = run_fresh(_MECHANICS)
    poll = out["poll"]
    assert 0 < poll < 0.5 and out["slept"] == [poll, 1, poll, 0]
    assert out["answer"] == 42  # everything else is the module's own
    assert out["until_done"] == [poll, poll]
    # The fake sleeps take no time, so the loop's clock is what ends it: at most the half second asked for.
    never = out["never_done"]
    assert never and all(0 < s <= poll for s in never)


_QUICKENED = """
import json
import gevent, time
from locust import main, rpc, runners
from loadgen.locust_plugin import locust_fixes

locust_fixes.install(lambda environment: False)
locust_fixes.install(lambda environment: False)  # idempotent: one stand-in each, not one around another
g, t, r = runners.gevent, main.time, runners.rpc
[start] = t.callers
stop, quit_ = runners.MasterRunner.stop.__code__, runners.MasterRunner.quit.__code__
print(json.dumps({
    "runners_shim": isinstance(g, locust_fixes.QuickPolls) and g.module is gevent,
    "main_shim": isinstance(t, locust_fixes.QuickPolls) and t.module is time,
    "rpc_shim": isinstance(r, locust_fixes.HeldRpc) and r.module is rpc.rpc,
    "stop_and_quit_are_the_masters": set(g.callers) == {stop, quit_} and g.callers[stop] is None,
    # The waits aimed at: the stop waits on user_count, the quit on the workers' last reports, the start on the
    # workers being ready, each with a sleep.
    "stop_loop": {"user_count", "sleep"} <= set(stop.co_names),
    "quit_sleep": {"clients", "sleep"} <= set(quit_.co_names) and 0.5 in quit_.co_consts,
    "start_loop": start.co_name == "start_automatic_run" and {"sleep", "expect_workers"} <= set(start.co_names),
    "delegates": g.spawn is gevent.spawn and t.monotonic is time.monotonic and r.Server is rpc.rpc.Server,
    "client_is_rpcs": issubclass(r.Client, rpc.rpc.Client),
}))
"""


def test_the_plugin_quickens_exactly_the_masters_start_stop_and_quit() -> None:
    out = run_fresh(_QUICKENED)
    assert out == dict.fromkeys(out, True) and len(out) == 9, out


_QUIT = """
import functools, json, sys
from types import SimpleNamespace
from locust.runners import STATE_MISSING, STATE_RUNNING
from loadgen.locust_plugin import locust_fixes

def quit_(self):  # the condition reads the master from the quit's frame
    return functools.partial(locust_fixes._quit_may_end, lambda environment: environment.reported)(sys._getframe())

def master(reported, *states):
    return SimpleNamespace(environment=SimpleNamespace(reported=reported),
                           clients=SimpleNamespace(all=[SimpleNamespace(state=s) for s in states]))

print(json.dumps({
    "none_left": quit_(master(True)),
    "only_missing": quit_(master(True, STATE_MISSING, STATE_MISSING)),
    "one_live": quit_(master(True, STATE_MISSING, STATE_RUNNING)),
    "not_reported": quit_(master(False)),
}))
"""


def test_the_quit_ends_early_only_once_reported_and_no_live_worker_is_left() -> None:
    out = run_fresh(_QUIT)
    assert out == {"none_left": True, "only_missing": True, "one_live": False, "not_reported": False}


_HELD = """
import json
import gevent
from locust.rpc import Message
from loadgen.locust_plugin import locust_fixes

class Wire:  # what the master sent, in order
    def __init__(self, *msgs):
        self.msgs = list(msgs)
    def recv(self):
        return self.msgs.pop(0)

Base = type("Client", (Wire,), {})
held = locust_fixes.HeldRpc(type("Rpc", (), {"Client": Base, "Server": object}))
client = held.Client(Message("ack", {"index": 0}, "m"), Message("loadgen_run", {"run": 1}, "m"),
                     Message("spawn", {}, "m"))
got = []
def loop():  # the worker's message loop
    for _ in range(3):
        got.append(client.recv().type)

g = gevent.spawn(loop)
gevent.sleep(0.2)  # the worker's init runs here: the loop has the ack only
before = list(got)
locust_fixes.initialised()
g.join(timeout=5)
print(json.dumps({"before_init": before, "after_init": got, "server": held.Server is object}))
"""


def test_a_worker_holds_its_masters_messages_until_loadgen_is_initialised() -> None:
    out = run_fresh(_HELD)
    assert out["before_init"] == ["ack"]
    assert out["after_init"] == ["ack", "loadgen_run", "spawn"]  # none dropped, none reordered
    assert out["server"] is True
