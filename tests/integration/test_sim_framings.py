"""The simulator's TGI and Ollama routes: their bytes on the wire (raw sockets), their ground truth, their faults,
and loadgen's own `tgi`, `ollama-chat` and `ollama-generate` dialects measured against that truth end to end."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import pytest

from loadgen.measure.records import ErrorKind, RequestRecord
from loadgen.protocol.accumulator import StreamAccumulator
from loadgen.protocol.dialects import get_dialect
from loadgen.sim.faults import CUT, ERROR_EVENT, HTTP_429, HTTP_500, HTTP_503, MALFORMED, RESET, STALL
from loadgen.sim.launch import SimServerThread, start_sim_process
from loadgen.sim.truth import TruthRequest, load_truth

from .harness import compare_with_truth, quantile, read_records, run_loadgen, write_scenario
from .wire import dechunk

STALL_S = 0.25
FAULTS: dict[str, dict[str, float]] = {
    "e500": {"error_rate": 1.0},
    "r429": {"rate_429": 1.0},
    "r503": {"rate_503": 1.0},
    "reset": {"reset_rate": 1.0},
    "cut": {"cut_rate": 1.0},
    "errev": {"error_event_rate": 1.0},
    "malformed": {"malformed_rate": 1.0},
    "stall": {"stall_rate": 1.0, "stall_s": STALL_S},
}
# loadgen dialect -> the simulator route it talks to
ROUTES = {"tgi": "/generate_stream", "ollama-chat": "/api/chat", "ollama-generate": "/api/generate"}


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimServerThread]:
    truth = tmp_path_factory.mktemp("framings") / "truth.jsonl"
    variants = ["base=int8", "sd=spec-decode"] + [f"{name}=int8" for name in FAULTS]
    with SimServerThread(variants, truth_log=truth, seed=5, faults=FAULTS) as server:
        yield server


def truth_of(sim: SimServerThread, variant: str, rid: str) -> TruthRequest:
    sim.flush_truth()
    assert sim.cluster.truth is not None
    return load_truth(sim.cluster.truth.path, variant=variant)[rid]


def body_for(dialect: str, words: int, max_tokens: int, **extra: Any) -> dict[str, Any]:
    text = " ".join(f"w{i}" for i in range(words))
    if dialect == "tgi":
        return {"inputs": text, "parameters": {"max_new_tokens": max_tokens, "details": True}, **extra}
    opts = {"options": {"num_predict": max_tokens}}
    if dialect == "ollama-chat":
        return {"model": "m", "messages": [{"role": "user", "content": text}], **opts, **extra}
    return {"model": "m", "prompt": text, **opts, **extra}


@dataclass
class Wire:
    """One request over a raw socket: status, headers, the body bytes with their receive times, how it ended."""

    status: int
    headers: dict[str, str]
    recvs: list[tuple[float, bytes]]
    error: OSError | None

    @property
    def body(self) -> bytes:
        return dechunk(b"".join(d for _, d in self.recvs))[0] if self.chunked else b"".join(d for _, d in self.recvs)

    @property
    def chunked(self) -> bool:
        return self.headers.get("transfer-encoding") == "chunked"

    @property
    def terminated(self) -> bool:
        return dechunk(b"".join(d for _, d in self.recvs))[1]


def post(port: int, path: str, body: dict[str, Any] | bytes, rid: str) -> Wire:
    payload = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = (
        b"POST %b HTTP/1.1\r\nHost: x\r\nX-Request-Id: %b\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%b"
        % (
            path.encode(),
            rid.encode(),
            len(payload),
            payload,
        )
    )
    buf, recvs, error = b"", [], None
    head = b""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(request)
        try:
            while chunk := s.recv(65536):
                now = time.monotonic()
                if head:
                    recvs.append((now, chunk))
                    continue
                buf += chunk
                if b"\r\n\r\n" in buf:
                    head, rest = buf.split(b"\r\n\r\n", 1)
                    if rest:
                        recvs.append((now, rest))
        except OSError as e:  # ConnectionResetError for an RST
            error = e
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1]) if head else 0
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return Wire(status, headers, recvs, error)


def events(dialect: str, body: bytes) -> list[bytes]:
    """The payloads of a TGI SSE body (``data:`` stripped) or the lines of an Ollama NDJSON body."""
    if dialect == "tgi":
        out = []
        for e in body.split(b"\n\n"):
            if e:
                assert e.startswith(b"data:{"), e  # TGI: no space after the colon
                out.append(e[len(b"data:") :])
        return out
    assert body.endswith(b"\n") or not body
    return [line for line in body.split(b"\n") if line]


def accumulate(dialect: str, wire: Wire) -> RequestRecord:
    """What loadgen's own dialect makes of the wire bytes, fed as they were received (de-chunked per recv)."""
    acc = StreamAccumulator(RequestRecord("r", "v", "m"), get_dialect(dialect))
    raw, seen = b"", 0
    for t, data in wire.recvs:
        raw += data
        body, _ = dechunk(raw)
        acc.feed(t, body[seen:])
        seen = len(body)
    return (
        acc.finish(time.monotonic())
        if wire.error is None
        else acc.fail(time.monotonic(), ErrorKind.STREAM_INTERRUPTED, str(wire.error))
    )


# ---- TGI ----


def test_tgi_generate_stream_framing_and_truth(sim: SimServerThread) -> None:
    w = post(sim.ports["sd"], "/generate_stream", body_for("tgi", 12, 40), "tgi-1")
    assert w.status == 200 and w.headers["content-type"] == "text/event-stream" and w.terminated
    assert w.headers["x-request-id"] == "tgi-1"
    objs = [json.loads(e) for e in events("tgi", w.body)]
    assert [o["index"] for o in objs] == list(range(1, 41))
    for o in objs:
        assert set(o) == {"index", "token", "generated_text", "details"}
        assert set(o["token"]) == {"id", "text", "logprob", "special"} and o["token"]["special"] is False
        assert len(o["token"]["text"].split()) == 1
    assert all(o["generated_text"] is None and o["details"] is None for o in objs[:-1])
    last = objs[-1]
    assert last["generated_text"] == "".join(o["token"]["text"] for o in objs)
    assert last["details"] == {"finish_reason": "length", "generated_tokens": 40, "seed": None, "input_length": 12}

    truth = truth_of(sim, "sd", "tgi-1")
    # One truth record per event, 1 token each; speculative decoding put several events in one write.
    assert truth.chunk_tokens == [1] * 40 and truth.finish == truth.chunk_times[-1]
    assert len(set(truth.chunk_times)) < 30
    rec = accumulate("tgi", w)
    assert rec.error is None and list(rec.chunk_tokens) == truth.chunk_tokens and rec.token_source == "server"
    assert rec.output_tokens == 40 and rec.prompt_tokens == 12
    assert all(c >= s for c, s in zip(rec.chunk_times, truth.chunk_times, strict=True))  # same clock


def test_tgi_details_only_when_asked_and_non_stream_generate(sim: SimServerThread) -> None:
    w = post(sim.ports["base"], "/generate_stream", {"inputs": "a b", "parameters": {"max_new_tokens": 3}}, "tgi-2")
    last = json.loads(events("tgi", w.body)[-1])
    assert last["generated_text"] is not None and last["details"] is None
    w = post(sim.ports["base"], "/generate", body_for("tgi", 4, 5), "tgi-3")
    assert w.status == 200 and w.headers["content-type"] == "application/json"
    obj = json.loads(w.body)
    assert len(obj["generated_text"].split()) == 5
    details = obj["details"]
    assert details["finish_reason"] == "length" and details["generated_tokens"] == 5 and len(details["tokens"]) == 5
    assert truth_of(sim, "base", "tgi-3").chunk_tokens == [5]
    w = post(sim.ports["base"], "/generate", {"inputs": "a"}, "tgi-4")
    assert json.loads(w.body) == {"generated_text": json.loads(w.body)["generated_text"]}  # no details
    assert len(json.loads(w.body)["generated_text"].split()) == 100  # TGI's default max_new_tokens


@pytest.mark.parametrize(
    "body", [{"parameters": {"max_new_tokens": 3}}, {"inputs": "a", "parameters": {"max_new_tokens": 0}}, b"{nope"]
)
def test_tgi_rejects_bad_requests_in_its_error_shape(sim: SimServerThread, body: dict[str, Any] | bytes) -> None:
    w = post(sim.ports["base"], "/generate_stream", body, "tgi-bad")
    obj = json.loads(w.body)
    assert w.status in (400, 422) and set(obj) == {"error", "error_type"} and obj["error"]


# ---- Ollama ----


@pytest.mark.parametrize("dialect", ["ollama-chat", "ollama-generate"])
def test_ollama_stream_framing_and_truth(sim: SimServerThread, dialect: str) -> None:
    rid = f"{dialect}-1"
    w = post(sim.ports["sd"], ROUTES[dialect], body_for(dialect, 9, 30), rid)  # no "stream": true by default
    assert w.status == 200 and w.headers["content-type"] == "application/x-ndjson" and w.terminated
    objs = [json.loads(line) for line in events(dialect, w.body)]
    *tokens, final = objs
    assert len(tokens) == 30 and all(o["done"] is False and o["model"] == "m" for o in tokens)
    assert all(o["created_at"].endswith("Z") and "T" in o["created_at"] for o in objs)
    texts = [o["message"]["content"] if dialect == "ollama-chat" else o["response"] for o in tokens]
    if dialect == "ollama-chat":
        assert all(o["message"]["role"] == "assistant" for o in objs)
        assert final["message"] == {"role": "assistant", "content": ""}
    else:
        assert final["response"] == ""
    assert all(len(t.split()) == 1 for t in texts)
    assert final["done"] is True and final["done_reason"] == "length"
    assert final["eval_count"] == 30 and final["prompt_eval_count"] == 9
    durations = [final[k] for k in ("total_duration", "prompt_eval_duration", "eval_duration", "load_duration")]
    assert all(isinstance(d, int) and d >= 0 for d in durations)
    assert final["prompt_eval_duration"] > 0 and final["eval_duration"] > 0
    assert final["total_duration"] >= final["prompt_eval_duration"] + final["eval_duration"] - 1000

    truth = truth_of(sim, "sd", rid)
    assert truth.chunk_tokens == [1] * 30 and len(set(truth.chunk_times)) < 30
    rec = accumulate(dialect, w)
    assert rec.error is None and list(rec.chunk_tokens) == truth.chunk_tokens
    assert rec.output_tokens == 30 and rec.prompt_tokens == 9
    assert rec.server_timings is not None and rec.server_timings["predicted_n"] == 30
    assert all(c >= s for c, s in zip(rec.chunk_times, truth.chunk_times, strict=True))


@pytest.mark.parametrize("dialect", ["ollama-chat", "ollama-generate"])
def test_ollama_non_stream(sim: SimServerThread, dialect: str) -> None:
    w = post(sim.ports["base"], ROUTES[dialect], body_for(dialect, 3, 4, stream=False), f"{dialect}-ns")
    assert w.status == 200 and w.headers["content-type"] == "application/json"
    obj = json.loads(w.body)
    text = obj["message"]["content"] if dialect == "ollama-chat" else obj["response"]
    assert len(text.split()) == 4 and obj["done"] is True and obj["eval_count"] == 4
    assert truth_of(sim, "base", f"{dialect}-ns").chunk_tokens == [4]


def test_ollama_rejects_bad_requests_in_its_error_shape(sim: SimServerThread) -> None:
    for body in ({"prompt": "a"}, {"model": "m", "prompt": "a", "options": {"num_predict": "x"}}, {"model": "m"}):
        path = "/api/chat" if "prompt" not in body else "/api/generate"
        w = post(sim.ports["base"], path, body, "o-bad")
        assert w.status == 400 and set(json.loads(w.body)) == {"error"}, body


# ---- faults on every framing ----


@pytest.mark.parametrize("dialect", list(ROUTES))
@pytest.mark.parametrize(
    ("variant", "fault", "status"), [("e500", HTTP_500, 500), ("r429", HTTP_429, 429), ("r503", HTTP_503, 503)]
)
def test_status_faults(sim: SimServerThread, dialect: str, variant: str, fault: str, status: int) -> None:
    rid = f"{variant}-{dialect}"
    w = post(sim.ports[variant], ROUTES[dialect], body_for(dialect, 3, 5), rid)
    assert w.status == status and w.headers["content-type"] == "application/json"
    assert w.headers.get("retry-after") == ("1" if status == 429 else None)
    obj = json.loads(w.body)
    assert set(obj) == ({"error", "error_type"} if dialect == "tgi" else {"error"}) and "fault" in obj["error"]
    truth = truth_of(sim, variant, rid)
    assert truth.faults == [fault] and not truth.chunk_times


@pytest.mark.parametrize("dialect", list(ROUTES))
def test_reset_cut_error_event_malformed_stall(sim: SimServerThread, dialect: str) -> None:
    route, n = ROUTES[dialect], 8
    # Reset: some token events, then a TCP RST; loadgen keeps the partial stream's timings.
    w = post(sim.ports["reset"], route, body_for(dialect, 3, n), f"rst-{dialect}")
    assert w.status == 200 and not w.terminated and (w.error is None or isinstance(w.error, ConnectionResetError))
    truth = truth_of(sim, "reset", f"rst-{dialect}")
    rec = accumulate(dialect, w)
    assert truth.faults == [RESET] and truth.aborted and 1 <= len(truth.chunk_tokens) < n
    assert list(rec.chunk_tokens) == truth.chunk_tokens and rec.error is not None

    # Cut: the body ends cleanly, without the end of stream.
    w = post(sim.ports["cut"], route, body_for(dialect, 3, n), f"cut-{dialect}")
    assert w.status == 200 and w.terminated
    objs = [json.loads(e) for e in events(dialect, w.body)]
    assert 1 <= len(objs) < n
    assert all(o.get("generated_text") is None and o.get("done") is not True for o in objs)
    rec = accumulate(dialect, w)
    assert rec.error == "stream_interrupted" and truth_of(sim, "cut", f"cut-{dialect}").faults == [CUT]

    # Error event: the route's own mid-stream error shape.
    w = post(sim.ports["errev"], route, body_for(dialect, 3, n), f"ee-{dialect}")
    last = json.loads(events(dialect, w.body)[-1])
    assert w.terminated and "error" in last and (("error_type" in last) == (dialect == "tgi"))
    rec = accumulate(dialect, w)
    assert rec.error == "server_error" and truth_of(sim, "errev", f"ee-{dialect}").faults == [ERROR_EVENT]

    # Malformed: one truncated event, then the stream goes on to its normal end.
    w = post(sim.ports["malformed"], route, body_for(dialect, 3, n), f"mal-{dialect}")
    bad = []
    for e in events(dialect, w.body):
        try:
            json.loads(e)
        except json.JSONDecodeError:
            bad.append(e)
    assert len(bad) == 1 and w.terminated
    assert accumulate(dialect, w).error == "malformed"
    truth = truth_of(sim, "malformed", f"mal-{dialect}")
    assert truth.faults == [MALFORMED] and truth.output_tokens == n and not truth.aborted

    # Stall after the first token.
    w = post(sim.ports["stall"], route, body_for(dialect, 3, 4), f"st-{dialect}")
    truth = truth_of(sim, "stall", f"st-{dialect}")
    assert truth.faults == [STALL] and truth.chunk_times[1] - truth.chunk_times[0] >= STALL_S
    rec = accumulate(dialect, w)
    assert rec.error is None and rec.output_tokens == 4 and rec.chunk_times[1] - rec.chunk_times[0] >= STALL_S - 0.05


# ---- loadgen end to end, against the truth ----

# loadgen dialect -> simulator variant (spec-decode puts several events in one write)
E2E = {"tgi": "tgi=spec-decode", "ollama-chat": "ochat=baseline", "ollama-generate": "ogen=spec-decode"}


@pytest.fixture(scope="module")
def e2e_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("framings-e2e")
    truth_path = tmp / "truth.jsonl"
    runs: dict[str, dict[str, Any]] = {}
    with start_sim_process(list(E2E.values()), truth_log=truth_path) as sim:
        for dialect, spec in E2E.items():
            name = spec.split("=")[0]
            raw = tmp / f"raw-{name}"
            scenario = write_scenario(
                tmp / f"{name}.yaml",
                {name: {"base_url": sim.base_url(name), "dialect": dialect}},
                # Enough requests that p99 is not a single sample (as in test_accuracy).
                load={"users": 16, "duration": "6s"},
                report_dir=str(tmp / f"report-{name}"),
            )
            proc = run_loadgen(scenario, "--workers", "0", "--raw-records", str(raw))
            runs[dialect] = {"proc": proc, "raw": raw, "variant": name}
    for run in runs.values():
        run["records"] = read_records(run["raw"])
        run["truth"] = load_truth(truth_path, variant=run["variant"])
    return runs


@pytest.mark.parametrize("dialect", list(E2E))
def test_loadgen_dialect_against_ground_truth(e2e_runs: dict[str, dict[str, Any]], dialect: str) -> None:
    run = e2e_runs[dialect]
    proc = run["proc"]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records, truth = run["records"], run["truth"]
    # Requests in flight at the stop are recorded too (cut_by_stop): what they got is the truth's beginning.
    cut = [r for r in records if r["cut_by_stop"]]
    records = [r for r in records if not r["cut_by_stop"]]
    assert len(records) >= 30 and all(r["error"] is None for r in records), [r["error_detail"] for r in records][:3]
    for r in cut:
        n = len(r["chunk_tokens"])
        assert r["chunk_tokens"] == truth[r["id"]].chunk_tokens[:n], r["id"]
    for r in records:
        t = truth[r["id"]]
        assert r["chunk_tokens"] == t.chunk_tokens, r["id"]
        assert r["output_tokens"] == t.output_tokens == r["max_tokens"], r["id"]
    if dialect != "ollama-chat":  # the spec-decode variants wrote several events at once
        assert sum(1 for r in records for a, b in pairwise(r["chunk_times"]) if a == b) > 50
    errs = compare_with_truth(records, truth)
    for metric in ("ttft", "itl"):
        abs_err = [abs(e) for e in errs[metric]]
        med, p99 = quantile(abs_err, 0.5), quantile(abs_err, 0.99)
        print(f"{dialect} {metric}: n={len(abs_err)} median |err| {med * 1e3:.3f} ms, p99 {p99 * 1e3:.3f} ms")
        assert med <= 0.0002, (metric, med)
        # Errors are measured outside each write's own interval (harness.compare_with_truth), so the simulator held up
        # between its clock read and its write is not counted. ITL (~10,000 samples) holds the accuracy tier's 1 ms;
        # TTFT has ~300, all sixteen first ones arriving together on the ramp, where one loop stall of the client
        # (60 ms seen once in eight sittings, on one stream) is a whole percent: 5 ms, which the stop's stall
        # (fixed: 19-24 ms at TTFT p99) still fails.
        assert p99 <= (0.005 if metric == "ttft" else 0.001), (metric, p99)
    assert min(errs["ttft"]) > -0.0005  # a client never sees bytes before the server wrote them


# ---- OpenAI chat: the output cap's two names ----


def test_max_completion_tokens_caps_the_output_as_openai_s_api_takes_it(sim: SimServerThread) -> None:
    """The body loadgen sends to api.openai.com (max_completion_tokens, resolved from the host) and the one it sends
    elsewhere (max_tokens): the simulator caps both at the asked length, as OpenAI does, and says which field was
    wrong when one is."""
    from loadgen.config.variant import Variant
    from loadgen.protocol.dialects import dialect_for

    for field, n in (("max_completion_tokens", 9), ("max_tokens", 13)):
        variant = Variant(name="v", base_url="http://127.0.0.1:1", model="m", max_tokens_field=field)
        dialect = dialect_for(variant.dialect, variant.max_tokens_field)
        spec = type("Spec", (), {"prompt": "w0 w1 w2", "system_prompt": "", "max_tokens": n})()
        raw = dialect.build_body(spec, "m", False, variant.extra_body)
        assert field.encode() in raw and raw.count(b"max_") == 1  # (exact_output adds min_tokens, not a cap)
        w = post(sim.ports["base"], "/v1/chat/completions", raw, f"cap-{field}")
        assert w.status == 200, w.body[:300]
        rec = accumulate("openai-chat", w)
        assert rec.error is None and rec.output_token_count == n
        assert truth_of(sim, "base", f"cap-{field}").output_tokens == n
    bad = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 0}
    w = post(sim.ports["base"], "/v1/chat/completions", bad, "cap-bad")
    assert w.status == 400 and b"'max_completion_tokens' must be a positive integer" in w.body
