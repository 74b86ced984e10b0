"""OpenAI-compatible routes of one simulated variant, and the set of variant servers of a simulator run.

Streams are framed exactly like vLLM's: the SSE head goes out together with a role-only chunk as soon as the
request is accepted (before any token), then one event per engine step carrying that step's tokens, the last one
with ``finish_reason: "length"``, an optional usage chunk, and ``data: [DONE]``.

A variant's ``FaultSpec`` (``loadgen.sim.faults``) bends this on purpose: error statuses, resets, cut or corrupted
streams, stalls and slow headers, each logged to the truth log and counted in ``loadgen_sim_faults_total``.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from loadgen.registry import Registry
from loadgen.sim.engine import Engine, RequestTooLargeError, SimSequence
from loadgen.sim.faults import (
    ERROR_EVENT,
    HTTP_429,
    HTTP_500,
    HTTP_503,
    JSON_ERROR_ON_STREAM,
    MALFORMED,
    RESET,
    SLOW_HEADERS,
    STALL,
    FaultInjector,
    FaultPlan,
    FaultSpec,
)
from loadgen.sim.http import Request, Response, serve_http
from loadgen.sim.profiles import SimProfile, profile_registry
from loadgen.sim.truth import TruthLog

_log = logging.getLogger(__name__)

DEFAULT_MAX_TOKENS = 16

# One whitespace-free word per token, each with a leading space: a client that splits on whitespace counts tokens
# exactly, and the text is readable in a debug dump.
_VOCAB: tuple[str, ...] = (
    " the", " of", " and", " to", " in", " is", " that", " for", " it", " as", " with", " was", " on", " be",
    " by", " at", " this", " are", " from", " or", " an", " have", " not", " they", " which", " one", " you",
    " were", " all", " we", " her", " she", " there", " would", " their", " will", " when", " who", " him",
    " been", " has", " more", " if", " no", " out", " so", " said", " what", " up", " its", " about",
    " into", " than", " them", " can", " only", " other", " new", " some", " could", " time", " these",
    " two", " may", " then", " do", " first", " any",
)  # fmt: skip

# vLLM's bucket boundaries, so dashboards built for vLLM read the simulator unchanged.
_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
_E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0)


class ApiError(Exception):
    def __init__(self, status: int, message: str, type_: str = "BadRequestError") -> None:
        super().__init__(message)
        self.status, self.message, self.type = status, message, type_

    def body(self) -> bytes:
        return orjson.dumps({"error": {"message": self.message, "type": self.type, "param": None, "code": self.status}})


@dataclass(frozen=True, slots=True)
class VariantSpec:
    name: str
    profile: SimProfile
    port: int = 0
    faults: FaultSpec = field(default_factory=FaultSpec)


def with_faults(specs: list[VariantSpec], faults: Mapping[str, Mapping[str, float]] | None) -> list[VariantSpec]:
    """``specs`` with the fault knobs ``{variant: {knob: value}}`` applied; unknown variants or knobs raise."""
    if not faults:
        return list(specs)
    names = {s.name for s in specs}
    unknown = sorted(set(faults) - names)
    if unknown:
        raise ValueError(f"faults given for unknown variant(s) {unknown}; variants: {sorted(names)}")
    return [replace(s, faults=FaultSpec.from_dict(faults[s.name])) if s.name in faults else s for s in specs]


def parse_variant(text: str, profiles: Registry[SimProfile] | None = None) -> VariantSpec:
    """Parse ``NAME[=PROFILE][:PORT]`` (profile defaults to NAME, port 0 = ephemeral)."""
    registry = profiles if profiles is not None else profile_registry()
    rest, port = text, 0
    head, sep, tail = text.rpartition(":")
    if sep:
        if not tail.isdigit() or int(tail) > 65535:
            raise ValueError(f"variant {text!r}: port must be a number 0-65535")
        rest, port = head, int(tail)
    name, _, profile_name = rest.partition("=")
    profile_name = profile_name or name
    if not name or not all(c.isalnum() or c in "._-" for c in name):
        raise ValueError(f"variant {text!r}: name must be non-empty letters, digits, '.', '_' or '-'")
    return VariantSpec(name, registry.get(profile_name), port)


def _content_words(content: Any) -> list[str]:
    if content is None:
        return []
    if isinstance(content, str):
        return content.split()
    if isinstance(content, list):  # OpenAI content parts: only text parts are billed
        words: list[str] = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                words.extend(part["text"].split())
        return words
    raise ApiError(400, "message content must be a string, a list of content parts or null")


def _prompt_words(chat: bool, req: dict[str, Any]) -> list[str]:
    if chat:
        messages = req.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ApiError(400, "'messages' is required and must be a non-empty list")
        words: list[str] = []
        for m in messages:
            if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                raise ApiError(400, "each message must be an object with a string 'role'")
            words.extend(_content_words(m.get("content")))
        return words
    prompt = req.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        return prompt.split()
    if isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return [str(t) for t in prompt]  # token ids: one word per id
    raise ApiError(400, "'prompt' is required: a string, a list of token ids, or a list with one of those")


def _max_tokens(req: dict[str, Any]) -> int:
    value = req.get("max_completion_tokens", req.get("max_tokens"))
    if value is None:
        return DEFAULT_MAX_TOKENS
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ApiError(400, "'max_tokens' must be a positive integer")
    return value


class _EngineCollector(Collector):
    """Gauges and counters read from the engine at scrape time: nothing is updated per token."""

    def __init__(self, engine: Engine, model: str) -> None:
        self._engine, self._model = engine, model

    def collect(self) -> Iterator[Metric]:
        e, labels = self._engine, [self._model]
        for name, doc, value in (
            ("vllm:num_requests_running", "Number of requests in model execution batches.", e.num_running),
            ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", e.num_waiting),
            ("vllm:gpu_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", e.kv_usage),
        ):
            g = GaugeMetricFamily(name, doc, labels=["model_name"])
            g.add_metric(labels, value)
            yield g
        s = e.stats
        for name, doc, total in (
            ("vllm:prompt_tokens", "Number of prefill tokens processed.", s.prompt_tokens_total),
            ("vllm:generation_tokens", "Number of generation tokens processed.", s.generation_tokens_total),
            ("vllm:prefix_cache_queries", "Prompt tokens looked up in the prefix cache.", s.prefix_cache_queries),
            ("vllm:prefix_cache_hits", "Prompt tokens served from the prefix cache.", s.prefix_cache_hits),
            ("vllm:num_preemptions", "Cumulative number of preemptions.", 0),
        ):
            c = CounterMetricFamily(name, doc, labels=["model_name"])
            c.add_metric(labels, total)
            yield c
        c = CounterMetricFamily(
            "vllm:request_success",
            "Count of successfully processed requests.",
            labels=["model_name", "finished_reason"],
        )
        c.add_metric([self._model, "length"], s.requests_finished)
        yield c


class _FaultCollector(Collector):
    """``loadgen_sim_faults_total{fault=...}``: every fault name is exported, 0 until injected, so rate() works."""

    def __init__(self, faults: FaultInjector) -> None:
        self._faults = faults

    def collect(self) -> Iterator[Metric]:
        c = CounterMetricFamily("loadgen_sim_faults", "Faults injected by the simulator.", labels=["fault"])
        for fault, count in self._faults.counts.items():
            c.add_metric([fault], count)
        yield c


# Status, message and OpenAI error type of the faults answered instead of a completion.
_FAULT_REPLIES: dict[str, tuple[int, str, str]] = {
    HTTP_500: (500, "simulated internal server error (loadgen sim fault injection)", "InternalServerError"),
    HTTP_429: (429, "simulated rate limit: too many requests (loadgen sim fault injection)", "RateLimitError"),
    HTTP_503: (503, "simulated overload: service unavailable (loadgen sim fault injection)", "ServiceUnavailableError"),
    JSON_ERROR_ON_STREAM: (
        400,
        "simulated JSON error on a streaming request (loadgen sim fault injection)",
        "BadRequestError",
    ),
}

# One pending piece of output while a stream is held: (bytes, tokens it carries, faults that take effect with it).
_Out = tuple[bytes, int, tuple[str, ...]]

# How a response ends: normally ("done"), or through a fault (CUT / ERROR_EVENT / RESET); None = more to come.
_DONE = "done"

_ERROR_EVENT = (
    b'data: {"error": {"message": "simulated mid-stream failure (loadgen sim fault injection)", '
    b'"type": "server_error", "code": 500}}\n\ndata: [DONE]\n\n'
)
_CHOICES_OPEN = b'"choices":['


def _truncated(event: bytes) -> bytes:
    """The event cut right after ``"choices":[``: what a proxy or a crashed writer leaves behind."""
    cut = event.find(_CHOICES_OPEN)
    body = event[: cut + len(_CHOICES_OPEN)] if cut >= 0 else event[: len(event) // 2]
    return body.rstrip(b"\n") + b"\n\n"


class _Stream:
    """One request in flight: the engine's token sink, writing SSE events (or the final JSON) to the client.

    Output can be *held* (headers delayed by ``slow_headers_s``, or a stall): the engine keeps generating, the
    events queue up in order in ``pending`` together with how the stream ends, and all of it goes out in one write
    when the hold ends. Truth records are taken at that write, so they stay the times the client could see.
    """

    __slots__ = (
        "server", "response", "rid", "cid", "model", "chat", "stream", "include_usage", "continuous",
        "prompt_tokens", "created", "vocab_offset", "arrival", "first_token", "seq",
        "plan", "hold", "pending", "pending_end", "malformed_sent",
    )  # fmt: skip

    def __init__(
        self,
        server: VariantServer,
        response: Response,
        rid: str,
        arrival: float,
        chat: bool,
        stream: bool,
        model: str,
        opts: dict[str, Any],
        prompt_tokens: int,
        vocab_offset: int,
        plan: FaultPlan | None = None,
    ) -> None:
        self.server, self.response, self.rid, self.arrival = server, response, rid, arrival
        self.chat, self.stream, self.model = chat, stream, model
        self.cid = ("chatcmpl-" if chat else "cmpl-") + rid
        self.include_usage = bool(opts.get("include_usage"))
        # vLLM only honours continuous_usage_stats together with include_usage; accepting it alone is lenient.
        self.continuous = bool(opts.get("continuous_usage_stats"))
        self.prompt_tokens = prompt_tokens
        self.created = int(time.time())
        self.vocab_offset = vocab_offset
        self.first_token: float | None = None
        self.seq: SimSequence | None = None
        self.plan = plan
        self.hold: asyncio.TimerHandle | None = None
        self.pending: list[_Out] = []
        self.pending_end: str | None = None
        self.malformed_sent = False

    def _chunk(self, choices: list[dict[str, Any]], completion_tokens: int | None) -> bytes:
        obj: dict[str, Any] = {
            "id": self.cid,
            "object": "chat.completion.chunk" if self.chat else "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }
        if completion_tokens is not None:
            obj["usage"] = self._usage(completion_tokens)
        return b"data: " + orjson.dumps(obj) + b"\n\n"

    def _usage(self, completion_tokens: int) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": self.prompt_tokens + completion_tokens,
        }

    def _choice(self, text: str, finish: str | None) -> dict[str, Any]:
        if self.chat:
            return {"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": finish}
        return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "stop_reason": None}

    def role_chunk(self) -> bytes:
        choice = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
        return self._chunk([choice], 0 if self.continuous else None)

    def text(self, start: int, n: int) -> str:
        vocab, off = _VOCAB, self.vocab_offset + start
        return "".join(vocab[(off + i) % len(vocab)] for i in range(n))

    # ---- output: start, hold, flush ----
    def begin(self) -> None:
        """Called once the request is queued: send the head now, or hold it for ``slow_headers_s``."""
        plan = self.plan
        if plan is not None and plan.slow_headers_s > 0:
            self.server.record_fault(self.rid, SLOW_HEADERS, time.monotonic())
            if self.stream and self.chat:
                self.pending.append((self.role_chunk(), 0, ()))
            self._hold_for(plan.slow_headers_s)
        elif self.stream:
            headers = [("x-request-id", self.rid)]
            self.response.start_stream(200, "text/event-stream", headers, self.role_chunk() if self.chat else b"")

    def _hold_for(self, seconds: float) -> None:
        self.hold = asyncio.get_running_loop().call_later(seconds, self._release)

    def _release(self) -> None:
        self.hold = None
        items, end = self.pending, self.pending_end
        self.pending, self.pending_end = [], None
        try:
            self._flush(items, end)
        except Exception:
            # A timer callback has no caller to report to: log, and drop the connection rather than leave the
            # client waiting on a response that will never come.
            _log.exception("fault-injected output of request %s failed", self.rid)
            self.response.reset()

    def _emit(self, item: _Out | None, end: str | None) -> None:
        if self.hold is not None:
            if item is not None:
                self.pending.append(item)
            self.pending_end = end
        else:
            self._flush([item] if item is not None else [], end)

    def _flush(self, items: list[_Out], end: str | None) -> None:
        r, server = self.response, self.server
        if not r.connected:
            return
        if not self.stream:
            if end == RESET:
                server.record_fault(self.rid, RESET, time.monotonic())
                r.reset()
            elif end == _DONE:
                body, n, _ = items[-1]
                t = r.send(200, body, headers=[("x-request-id", self.rid)])
                server.record_tokens(self, t, n)
                server.record_finish(self, t)
            return
        data = b"".join(chunk for chunk, _, _ in items)
        closes = end is not None and end != RESET  # done, cut and error_event all end the chunked body cleanly
        if not r.started:
            t = r.start_stream(200, "text/event-stream", [("x-request-id", self.rid)], data)
            if closes:
                r.write(b"", end=True)
        else:
            t = r.write(data, end=closes)
        had_token = self.first_token is not None
        for _, n, faults in items:
            if n:
                server.record_tokens(self, t, n)
            for fault in faults:
                server.record_fault(self.rid, fault, t)
        if end == _DONE:
            server.record_finish(self, t)
        elif end is not None:
            server.record_fault(self.rid, end, t)
            if end == RESET:
                r.reset()  # connection_lost then runs abort(), which records the abort
            elif server.truth is not None:  # the request did not complete: same record as a client hang-up
                server.truth.abort(self.rid, server.name, t)
        elif not had_token and self.first_token is not None and self.plan is not None and self.plan.stall_s > 0:
            # The first token chunk just went out and more will follow: go silent now.
            server.record_fault(self.rid, STALL, t)
            self._hold_for(self.plan.stall_s)

    # ---- engine sink ----
    def on_tokens(self, seq: SimSequence, n_tokens: int, finished: bool) -> None:
        if not self.response.connected:
            return  # connection_lost is about to abort this sequence
        plan = self.plan
        end = plan.end if plan is not None and plan.end is not None and seq.generated >= plan.end_at else None
        if end is not None:
            # Free the batch slot and KV now, even if the output is still held: the stream ends here.
            self.server.engine.abort(seq)
        if not self.stream:
            if end == RESET:
                self._emit(None, RESET)
            elif finished:
                self._emit((self._full_response(seq.generated), seq.generated, ()), _DONE)
            return  # non-streamed: nothing to send until the last token
        # A stream ended by a fault never reports a finish_reason, even if the engine happened to finish.
        finish = "length" if finished and end is None else None
        event = self._chunk(
            [self._choice(self.text(seq.generated - n_tokens, n_tokens), finish)],
            seq.generated if self.continuous else None,
        )
        faults: tuple[str, ...] = ()
        if plan is not None and plan.malformed_at and not self.malformed_sent and seq.generated >= plan.malformed_at:
            self.malformed_sent = True
            event = _truncated(event) + event
            faults = (MALFORMED,)
        if end is None and finished:
            if self.include_usage:
                event += self._chunk([], seq.generated)
            event += b"data: [DONE]\n\n"
            end = _DONE
        elif end == ERROR_EVENT:
            event += _ERROR_EVENT
        self._emit((event, n_tokens, faults), end)

    def _full_response(self, completion_tokens: int) -> bytes:
        text = self.text(0, completion_tokens)
        choice: dict[str, Any]
        if self.chat:
            message = {"role": "assistant", "content": text}
            choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": "length"}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length", "stop_reason": None}
        obj = {
            "id": self.cid,
            "object": "chat.completion" if self.chat else "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": [choice],
            "usage": self._usage(completion_tokens),
        }
        return orjson.dumps(obj)

    def abort(self) -> None:
        if self.hold is not None:  # the timer would write to a dead connection and keep this object alive
            self.hold.cancel()
            self.hold = None
        if self.seq is not None:
            self.server.engine.abort(self.seq)
        if self.server.truth is not None:
            self.server.truth.abort(self.rid, self.server.name, time.monotonic())


class VariantServer:
    """HTTP front end + engine + metrics of one variant."""

    def __init__(
        self,
        name: str,
        profile: SimProfile,
        seed: int = 0,
        truth: TruthLog | None = None,
        faults: FaultSpec | None = None,
    ) -> None:
        self.name = name
        self.profile = profile
        self.engine = Engine(profile, seed=f"{seed}:{name}")  # per-variant stream, stable if variants are added
        # Its own RNG stream: enabling faults must not shift the engine's speculative-decoding draws.
        self.faults = FaultInjector(faults or FaultSpec(), seed=f"{seed}:{name}:faults")
        self.truth = truth
        self.port = 0
        self._server: asyncio.Server | None = None
        self._requests = 0
        self.metrics = CollectorRegistry(auto_describe=True)
        self.metrics.register(_EngineCollector(self.engine, name))
        self.metrics.register(_FaultCollector(self.faults))
        self._ttft = Histogram(
            "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ["model_name"],
            registry=self.metrics, buckets=_TTFT_BUCKETS,
        ).labels(name)  # fmt: skip
        self._e2e = Histogram(
            "vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.", ["model_name"],
            registry=self.metrics, buckets=_E2E_BUCKETS,
        ).labels(name)  # fmt: skip

    async def start(self, host: str, port: int = 0) -> int:
        self.engine.start()
        self._server = await serve_http(self.handle, host, port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        await self.engine.close()

    # ---- bookkeeping called by _Stream ----
    def record_tokens(self, stream: _Stream, t: float, n: int) -> None:
        if self.truth is not None:
            self.truth.token(stream.rid, self.name, t, n)
        if stream.first_token is None:
            stream.first_token = t
            self._ttft.observe(t - stream.arrival)

    def record_finish(self, stream: _Stream, t: float) -> None:
        self._e2e.observe(t - stream.arrival)
        if self.truth is not None:
            self.truth.finish(stream.rid, self.name, t)

    def record_fault(self, rid: str, fault: str, t: float) -> None:
        self.faults.counts[fault] += 1
        if self.truth is not None:
            self.truth.fault(rid, self.name, t, fault)

    # ---- routing ----
    def handle(self, request: Request, response: Response) -> None:
        rid = request.headers.get("x-request-id") or uuid.uuid4().hex
        extra = [("x-request-id", rid)]
        path = request.path
        try:
            if path in ("/v1/chat/completions", "/v1/completions"):
                if request.method != "POST":
                    raise ApiError(405, f"{request.method} not allowed on {path}", "MethodNotAllowed")
                self._completion(request, response, rid, chat=path == "/v1/chat/completions")
                return
            if request.method != "GET":
                raise ApiError(405 if path in ("/health", "/metrics", "/v1/models") else 404, "not found", "NotFound")
            if path == "/health":
                response.send(200, b"", "text/plain", extra)
            elif path == "/metrics":
                response.send(200, generate_latest(self.metrics), CONTENT_TYPE_LATEST, extra)
            elif path == "/v1/models":
                response.send(200, self._models(), headers=extra)
            else:
                raise ApiError(404, f"no route for {path}", "NotFound")
        except ApiError as e:
            response.send(e.status, e.body(), headers=extra)

    def _models(self) -> bytes:
        model = {
            "id": self.name,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "loadgen-sim",
            "root": self.name,
            "max_model_len": self.profile.kv_cache_tokens,
            "description": self.profile.description,
        }
        return orjson.dumps({"object": "list", "data": [model]})

    def _completion(self, request: Request, response: Response, rid: str, chat: bool) -> None:
        try:
            req = orjson.loads(request.body)
        except orjson.JSONDecodeError as e:
            raise ApiError(400, f"request body is not valid JSON: {e}") from None
        if not isinstance(req, dict):
            raise ApiError(400, "request body must be a JSON object")
        words = _prompt_words(chat, req)
        max_tokens = _max_tokens(req)
        if req.get("n", 1) != 1:
            raise ApiError(400, "the simulator supports n=1 only")
        stream = req.get("stream", False)
        if not isinstance(stream, bool):
            raise ApiError(400, "'stream' must be a boolean")
        opts = req.get("stream_options") or {}
        if not isinstance(opts, dict):
            raise ApiError(400, "'stream_options' must be an object")
        model = req.get("model") or self.name
        if not isinstance(model, str):
            raise ApiError(400, "'model' must be a string")

        plan = self.faults.draw(max_tokens, stream)
        if plan is not None and plan.reply is not None:
            if self.truth is not None:
                self.truth.arrival(rid, self.name, request.arrival)
            self._fault_reply(response, rid, plan)
            return
        s = _Stream(self, response, rid, request.arrival, chat, stream, model, opts, len(words), self._requests, plan)
        self._requests += 1
        try:
            s.seq = self.engine.submit(rid, words, max_tokens, s)
        except RequestTooLargeError as e:
            raise ApiError(400, str(e)) from None
        if self.truth is not None:
            self.truth.arrival(rid, self.name, request.arrival)
        response.on_abort = s.abort
        s.begin()

    def _fault_reply(self, response: Response, rid: str, plan: FaultPlan) -> None:
        """Answer with the error status ``plan.reply`` instead of running the request (after ``slow_headers_s``)."""
        fault = plan.reply
        assert fault is not None
        status, message, type_ = _FAULT_REPLIES[fault]
        headers = [("x-request-id", rid)]
        if fault == HTTP_429:
            headers.append(("retry-after", "1"))
        body = ApiError(status, message, type_).body()

        def send() -> None:
            if response.connected and not response.started:
                self.record_fault(rid, fault, response.send(status, body, headers=headers))

        if plan.slow_headers_s > 0:
            self.record_fault(rid, SLOW_HEADERS, time.monotonic())
            timer = asyncio.get_running_loop().call_later(plan.slow_headers_s, send)
            response.on_abort = timer.cancel  # a client that gives up must not leave the timer behind
        else:
            send()


class SimCluster:
    """All variant servers of one simulator run, sharing one event loop and one truth log."""

    def __init__(
        self, specs: list[VariantSpec], host: str = "127.0.0.1", seed: int = 0, truth_log: Path | None = None
    ) -> None:
        names = [s.name for s in specs]
        if len(set(names)) != len(names):
            raise ValueError(f"variant names must be unique, got {names}")
        self.host = host
        self.specs = specs
        self.truth = TruthLog(truth_log) if truth_log is not None else None
        self.servers = [VariantServer(s.name, s.profile, seed, self.truth, s.faults) for s in specs]
        self.ports: dict[str, int] = {}

    async def start(self) -> dict[str, int]:
        if self.truth is not None:
            self.truth.start()
        for spec, server in zip(self.specs, self.servers, strict=True):
            self.ports[spec.name] = await server.start(self.host, spec.port)
        return dict(self.ports)

    async def close(self) -> None:
        for server in self.servers:
            await server.close()
        if self.truth is not None:
            await self.truth.close()
