"""Sessions on the wire, end to end: `loadgen run` with `variants[].routing` against a small server that records the
routing headers of every request and answers like a session-affinity router — a fresh token on each request that
came without one, and (as a router moving a session) a new token on every third turn.

Checked against what the server received, request by request (joined to the raw records by X-Request-Id): every
turn of a multi-turn session carries its session's id, the same on both variants; turn 1 carries no token and every
later turn carries the latest one the server gave that session, never another session's; single-turn requests carry
neither; every request carries its variant's SLO headers; and no token reaches the raw records or the reports.
A second run sends agent tasks whose steps spawn sub-agents: each sub-agent is a session of its own (its id the
task's with its path, its parent's id in X-Dynamo-Parent-Session-ID, its own token), and no request carries another
session's id or token.
"""

from __future__ import annotations

import itertools
import re
import threading
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from tests.serving import threaded_http

from .canaries import SSE_REPLY, all_bytes
from .harness import read_records, run_loadgen, write_scenario

_HEADERS = ("X-Request-Id", "X-Dynamo-Session-ID", "x-session-token", "x-slo-ttft-ms", "x-llm-d-slo-ttft-ms")
_HEADERS += ("x-slo-tpot-ms", "X-Dynamo-Parent-Session-ID")
_RID = re.compile(r"-(?P<variant>[ab])-(?P<stream>\d+)-(?P<index>\d+)(?:-b(?P<branch>[\d.]+))?(?:-t(?P<turn>\d+))?$")


@contextmanager
def _router() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A server that logs each request's routing headers and the token it answered with."""
    seen: list[dict[str, Any]] = []
    lock = threading.Lock()
    counter = itertools.count(1)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 - http.server API
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            got = {h: self.headers.get(h) for h in _HEADERS}
            turn = _RID.search(got["X-Request-Id"] or "")
            third = turn is not None and turn["turn"] is not None and int(turn["turn"]) % 3 == 0
            token = None
            if got["x-session-token"] is None:
                token = f"tok-{next(counter)}"  # the replica the router picked, for a request without one
            elif third:
                token = f"moved-{next(counter)}"  # the router moves the session
            with lock:
                seen.append({**got, "answered": token})
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            if token is not None:
                self.send_header("x-session-token", token)
            self.send_header("Content-Length", str(len(SSE_REPLY)))
            self.end_headers()
            self.wfile.write(SSE_REPLY)

        def log_message(self, *args: object) -> None:
            pass

    with threaded_http(Handler) as srv:
        yield f"http://127.0.0.1:{srv.server_address[1]}", seen


def test_session_ids_and_router_tokens_ride_on_their_session_s_requests_only(tmp_path: Path) -> None:
    routing = {"preset": "dynamo", "token_header": "x-session-token"}
    with _router() as (url, seen):
        path = write_scenario(
            tmp_path / "s.yaml",
            {
                "a": {"base_url": url, "routing": {**routing, "slo_headers": {}}},
                "b": {
                    "base_url": url,
                    "routing": {
                        **routing,
                        "slo_headers": {"ttft_ms": 250, "tpot_ms": 20.5, "ttft_header": "x-llm-d-slo-ttft-ms"},
                    },
                },
            },
            traffic={
                "mixes": [
                    {"name": "talk", "weight": 3, "sessions": {"turns": [3, 6], "think_time": "20ms"}},
                    {"name": "short", "weight": 1},
                ],
                "custom_mixes": {
                    "talk": {
                        "buckets": [{"name": "s", "prompt_tokens": [10, 30], "weight": 1}],
                        "output_tokens": [5, 5],
                    },
                    "short": {
                        "buckets": [{"name": "s", "prompt_tokens": [10, 30], "weight": 1}],
                        "output_tokens": [5, 5],
                    },
                },
            },
            goodput={"ttft_ms": 1500, "tpot_ms": 40},
            load={"users": 6, "spawn_rate": 100, "duration": "3s", "warmup": 0, "think_time": 0.01},
            slos=[],
        )
        proc = run_loadgen(path, "--workers", "0", "--raw-records", str(tmp_path / "raw"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = {r["id"]: r for r in read_records(tmp_path / "raw")}
    sessions: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    singles = 0
    for got in seen:
        rid = got["X-Request-Id"]
        rec = records[rid]  # every request the server saw has its record
        m = _RID.search(rid)
        assert m is not None, rid
        variant = m["variant"]
        # SLO headers on every request: variant a's from goodput, b's given (one renamed).
        if variant == "a":
            assert (got["x-slo-ttft-ms"], got["x-slo-tpot-ms"], got["x-llm-d-slo-ttft-ms"]) == ("1500", "40", None)
        else:
            assert (got["x-llm-d-slo-ttft-ms"], got["x-slo-tpot-ms"], got["x-slo-ttft-ms"]) == ("250", "20.5", None)
        if rec["mix"] == "short":
            assert rec["turn"] == 0 and got["X-Dynamo-Session-ID"] is None and got["x-session-token"] is None, got
            singles += 1
            continue
        assert rec["turn"] == int(m["turn"] or 1)
        # The session's id: seeded (write_scenario's seed 7), its pair key, the same on both variants.
        assert got["X-Dynamo-Session-ID"] == f"lg-7-{m['stream']}-{m['index']}", got
        sessions[(variant, m["stream"], m["index"])].append({**got, "turn": rec["turn"]})
    long_ones = 0
    for key, turns in sessions.items():
        turns.sort(key=lambda t: t["turn"])
        assert [t["turn"] for t in turns] == list(range(1, len(turns) + 1)), key
        latest = None  # the token the server last gave this session
        for t in turns:
            assert t["x-session-token"] == latest, (key, t)
            latest = t["answered"] or latest
        long_ones += len(turns) >= 4  # a token replayed, then moved by the router
    ids = {v: {k[1:] for k in sessions if k[0] == v} for v in ("a", "b")}
    streams = {v: {k[0] for k in ids[v]} for v in ("a", "b")}
    print(f"{len(seen)} requests, {len(sessions)} sessions ({long_ones} of 4+ turns), {singles} single requests")
    assert long_ones >= 4 and singles >= 4, (long_ones, singles)
    assert len(streams["a"]) >= 2 and len(streams["b"]) >= 2, streams  # several users per variant
    assert ids["a"] & ids["b"], ids  # the same sessions on both variants
    # A router's token is not kept anywhere: not in a raw record, not in a report.
    written = all_bytes(tmp_path / "raw") + all_bytes(tmp_path / "report")
    assert b"tok-" not in written and b"moved-" not in written


def test_an_agents_sub_agents_are_sessions_of_their_own_on_the_wire(tmp_path: Path) -> None:
    agent = {
        "steps": [2, 3],
        "tool_latency": ["10ms", "20ms"],
        "tool_result_tokens": [5, 10],
        "subagents": {"share": 1.0, "count": [1, 2], "steps": [2, 2], "task_tokens": [5, 10]},
        "compaction": None,
    }
    mix = {"buckets": [{"name": "s", "prompt_tokens": [10, 30], "weight": 1}], "output_tokens": [5, 5]}
    with _router() as (url, seen):
        path = write_scenario(
            tmp_path / "s.yaml",
            {"a": {"base_url": url, "routing": {"preset": "dynamo", "token_header": "x-session-token"}}},
            traffic={"mixes": [{"name": "work", "agent": agent}], "custom_mixes": {"work": mix}},
            load={"users": 3, "spawn_rate": 100, "duration": "2s", "warmup": 0, "drain": "5s"},
            slos=[],
        )
        proc = run_loadgen(path, "--workers", "0", "--raw-records", str(tmp_path / "raw"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = {r["id"]: r for r in read_records(tmp_path / "raw")}
    sessions: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for got in seen:
        rid = got["X-Request-Id"]
        m = _RID.search(rid)
        assert m is not None and rid in records, rid
        task, branch = f"lg-7-{m['stream']}-{m['index']}", m["branch"] or ""
        assert got["X-Dynamo-Session-ID"] == task + (f"-b{branch}" if branch else ""), got
        parent = task + (f"-b{branch.rpartition('.')[0]}" if "." in branch else "")
        assert got["X-Dynamo-Parent-Session-ID"] == (parent if branch else None), got
        sessions[(m["stream"], m["index"], branch)].append({**got, "turn": records[rid]["turn"]})
    subs = 0
    for key, turns in sessions.items():
        turns.sort(key=lambda t: t["turn"])
        latest = None  # the token the server last gave this session (a sub-agent's is its own)
        for t in turns:
            assert t["x-session-token"] == latest, (key, t)
            latest = t["answered"] or latest
        subs += bool(key[2])
    assert subs >= 3 and len(sessions) - subs >= 3, sorted(sessions)
