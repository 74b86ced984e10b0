"""Structured output judged against the simulator, whose replies to a response_format are `{"answer": "<tokens>"}`
(loadgen/sim/framings/tools.py): valid JSON, an object, matching a schema that asks for a string `answer` and no
synthetic schema (which requires other properties). Each raw record's verdict is the one that truth implies, and the
report's counts per mix are the records'. And against a server that records bodies: requests with tools or a
response_format go without the variant's exact_output, plain ones with it."""

from __future__ import annotations

import json
from collections import Counter
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from loadgen.sim.launch import start_sim_process

from .canaries import SSE_REPLY, send_reply, threaded_http
from .harness import read_records, read_report, run_loadgen, write_scenario

_ANSWER = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
_MIXES: list[dict[str, Any]] = [
    {"name": "object", "weight": 1, "tools": {"response_format": "json_object"}},
    {"name": "given", "weight": 1, "tools": {"response_format": "json_schema", "json_schema": _ANSWER}},
    {"name": "synthetic", "weight": 1, "tools": {"response_format": "json_schema", "parameters": [2, 3]}},
]
_SHORT = {"buckets": [{"name": "s", "prompt_tokens": [30, 120], "weight": 1}], "output_tokens": [20, 60]}
_TRUTH = {"object": "valid", "given": "valid", "synthetic": "off_schema"}


def test_each_reply_is_judged_as_its_truth_says(tmp_path: Path) -> None:
    with start_sim_process(["sim=baseline"]) as sim:
        scenario = write_scenario(
            tmp_path / "s.yaml",
            {"sim": sim.base_url("sim")},
            traffic={"mixes": _MIXES, "custom_mixes": {m["name"]: _SHORT for m in _MIXES}},
            load={"users": 6, "duration": "3s", "warmup": 0},
        )
        proc = run_loadgen(scenario, "--workers", "0", "--raw-records", str(tmp_path / "raw"))
        assert proc.returncode == 0, proc.stdout + proc.stderr
    done = [r for r in read_records(tmp_path / "raw") if r["fate"] in ("succeeded", "drained")]
    assert {r["mix"] for r in done} == set(_TRUTH), Counter(r["mix"] for r in done)
    for r in done:
        assert r["carried_tools"] and r["structured"] == _TRUTH[r["mix"]], r
    report = read_report(tmp_path / "report")["variants"][0]["tool_calls"]
    for mix, want in _TRUTH.items():
        got = report["mixes"][mix]["structured"]
        n = sum(r["mix"] == mix for r in done)
        assert got["judged"] == n and got[want] == n, (mix, got)
    assert report["structured"]["valid_share"] == round(sum(r["structured"] == "valid" for r in done) / len(done), 4)


def test_requests_with_a_structure_do_not_force_their_length(tmp_path: Path) -> None:
    # exact_output is on by default (ignore_eos + min_tokens): a plain request carries it, one with a response_format
    # or tools does not (forcing tokens past a closed JSON object or tool call breaks it), and keeps max_tokens.
    bodies: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 - http.server API
            bodies.append(json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0")))))
            send_reply(self, 200, "text/event-stream", SSE_REPLY)

        def log_message(self, *args: object) -> None:
            pass

    mixes = [{"name": "plain", "weight": 1}, {**_MIXES[1], "name": "given"}, {"name": "tools", "weight": 1}]
    mixes[2]["tools"] = {"functions": 2, "tool_choice": "required"}
    with threaded_http(Handler) as srv:
        scenario = write_scenario(
            tmp_path / "s.yaml",
            {"echo": f"http://127.0.0.1:{srv.server_address[1]}"},
            traffic={"mixes": mixes, "custom_mixes": {m["name"]: _SHORT for m in mixes}},
            load={"users": 3, "duration": "1s", "warmup": 0},
        )
        proc = run_loadgen(scenario, "--workers", "0")
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    plain = [b for b in bodies if "response_format" not in b and "tools" not in b]
    structured = [b for b in bodies if "response_format" in b or "tools" in b]
    assert plain and structured, len(bodies)
    assert all(b["ignore_eos"] is True and b["min_tokens"] == b["max_tokens"] for b in plain), plain[0]
    assert all("ignore_eos" not in b and "min_tokens" not in b and b["max_tokens"] > 0 for b in structured)
