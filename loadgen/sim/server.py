"""The generation routes of one simulated variant, and the set of variant servers of a simulator run.

Every variant speaks the OpenAI, TGI and Ollama framings (``loadgen.sim.framings`` builds their bytes); this module
times them. Streams start as soon as the request is accepted (the head, with vLLM's role-only chunk for OpenAI chat),
then everything an engine step produced for the request leaves in one write, the last step with the stream's end.

A variant's ``FaultSpec`` (``loadgen.sim.faults``) bends this on purpose, on every route: error statuses, resets,
cut or corrupted streams, mid-stream error events, stalls and slow headers, each logged to the truth log and counted
in ``loadgen_sim_faults_total``.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import orjson
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from loadgen.registry import Registry
from loadgen.sim.discovery import DISCOVERY_PATHS, discovery_body
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
from loadgen.sim.framings import DEFAULT_MAX_TOKENS, FRAMINGS, ApiError, Framing, SimRequest, greedy_offset
from loadgen.sim.http import Request, Response, serve_http
from loadgen.sim.lora import models_body, resolve_adapter
from loadgen.sim.metrics import E2E_BUCKETS, TTFT_BUCKETS, EngineCollector, FaultCollector, RequestTimes
from loadgen.sim.profiles import SimProfile, profile_registry
from loadgen.sim.truth import TruthLog

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "SimCluster",
    "VariantServer",
    "VariantSpec",
    "parse_variant",
    "with_faults",
    "with_profile_changes",
]

_log = logging.getLogger(__name__)

_OPENAI = FRAMINGS["/v1/chat/completions"]  # the shape of errors on routes outside any framing


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


def with_profile_changes(
    specs: list[VariantSpec], changes: Mapping[str, Mapping[str, str]] | None
) -> list[VariantSpec]:
    """``specs`` with profile fields changed, ``{variant: {field: value text}}`` (``--set``); unknown variants or
    fields, and bad values, raise ValueError."""
    if not changes:
        return list(specs)
    unknown = sorted(set(changes) - {s.name for s in specs})
    if unknown:
        raise ValueError(f"--set for unknown variant(s) {unknown}; variants: {sorted(s.name for s in specs)}")
    return [replace(s, profile=s.profile.with_changes(changes[s.name])) if s.name in changes else s for s in specs]


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


class _Stream:
    """One request in flight: the engine's token sink, writing its framing's events (or the final body) to the client.

    Output can be *held* (headers delayed by ``slow_headers_s``, or a stall): the engine keeps generating, the
    events queue up in order in ``pending`` together with how the stream ends, and all of it goes out in one write
    when the hold ends. Truth records are taken at that write, so they stay the times the client could see.
    """

    __slots__ = (
        "server", "response", "framing", "req", "rid", "created", "vocab_offset", "perturbed", "arrival", "first_token",
        "first_step", "seq", "plan", "hold", "pending", "pending_end", "malformed_sent", "reasoning_tokens",
    )  # fmt: skip

    def __init__(
        self,
        server: VariantServer,
        response: Response,
        framing: Framing,
        req: SimRequest,
        rid: str,
        arrival: float,
        vocab_offset: int,
        plan: FaultPlan | None = None,
        perturbed: frozenset[int] = frozenset(),
    ) -> None:
        self.server, self.response, self.framing, self.req = server, response, framing, req
        self.rid, self.arrival = rid, arrival
        self.created = int(time.time())
        self.vocab_offset = vocab_offset
        self.perturbed = perturbed
        self.first_token: float | None = None  # write time of the first token
        self.first_step: float | None = None  # engine time of the step that produced it
        self.seq: SimSequence | None = None
        self.plan = plan
        self.hold: asyncio.TimerHandle | None = None
        self.pending: list[_Out] = []
        self.pending_end: str | None = None
        self.malformed_sent = False
        self.reasoning_tokens = min(server.profile.reasoning_tokens, req.max_tokens) if framing.reasoning else 0

    @property
    def prompt_tokens(self) -> int:
        return len(self.req.words)

    @property
    def cached_tokens(self) -> int:
        return self.seq.cached_tokens if self.seq is not None else 0

    def _start(self, data: bytes) -> float:
        return self.response.start_stream(200, self.framing.content_type, [("x-request-id", self.rid)], data)

    # ---- output: start, hold, flush ----
    def begin(self) -> None:
        """Called once the request is queued: send the head now, or hold it for ``slow_headers_s``."""
        plan = self.plan
        if plan is not None and plan.slow_headers_s > 0:
            self.server.record_fault(self.rid, SLOW_HEADERS, time.monotonic())
            head = self.framing.head(self) if self.req.stream else b""
            if head:
                self.pending.append((head, 0, ()))
            self._hold_for(plan.slow_headers_s)
        elif self.req.stream and self.framing.head_on_accept:
            self._start(self.framing.head(self))

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

    def _emit(self, items: list[_Out], end: str | None) -> None:
        if self.hold is not None:
            self.pending.extend(items)
            self.pending_end = end
        else:
            self._flush(items, end)

    def _flush(self, items: list[_Out], end: str | None) -> None:
        r, server = self.response, self.server
        if not r.connected:
            return
        if not self.req.stream:
            if end == RESET:
                server.record_fault(self.rid, RESET, time.monotonic())
                r.reset()
            elif end == _DONE:
                body, n, _ = items[-1]
                t = r.send(200, body, headers=[("x-request-id", self.rid)])
                server.record_tokens(self, t, n, r.written_at)
                server.record_finish(self, t)
            return
        data = b"".join(chunk for chunk, _, _ in items)
        closes = end is not None and end != RESET  # done, cut and error_event all end the chunked body cleanly
        if not r.started:
            t = self._start(data)
            t_end = r.written_at
            if closes:
                r.write(b"", end=True)
        else:
            t = r.write(data, end=closes)
            t_end = r.written_at
        had_token = self.first_token is not None
        for _, n, faults in items:
            for fault in faults:
                server.record_fault(self.rid, fault, t)
            if n:
                server.record_tokens(self, t, n, t_end)
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
        if self.first_step is None:
            self.first_step = time.monotonic()
        plan = self.plan
        end = plan.end if plan is not None and plan.end is not None and seq.generated >= plan.end_at else None
        if end is not None:
            # Free the batch slot and KV now, even if the output is still held: the stream ends here.
            self.server.engine.abort(seq)
        framing = self.framing
        if not self.req.stream:
            if end == RESET:
                self._emit([], RESET)
            elif finished:
                self._emit([(framing.full(self, seq.generated), seq.generated, ())], _DONE)
            return  # non-streamed: nothing to send until the last token
        # A stream ended by a fault never reports its finish, even if the engine happened to finish.
        final = finished and end is None
        items: list[_Out] = [(b, n, ()) for b, n in framing.tokens(self, seq.generated - n_tokens, n_tokens, final)]
        if plan is not None and plan.malformed_at and not self.malformed_sent and seq.generated >= plan.malformed_at:
            self.malformed_sent = True
            items.insert(0, (framing.truncated(items[0][0]), 0, (MALFORMED,)))
        if final:
            items.append((framing.end(self, seq.generated), 0, ()))
            end = _DONE
        elif end == ERROR_EVENT:
            items.append((framing.error_event(), 0, ()))
        self._emit(items, end)

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
        self.seed = seed
        self.engine = Engine(profile, seed=f"{seed}:{name}")  # per-variant stream, stable if variants are added
        # Its own RNG stream: enabling faults must not shift the engine's speculative-decoding draws.
        self.faults = FaultInjector(faults or FaultSpec(), seed=f"{seed}:{name}:faults")
        self.truth = truth
        self.port = 0
        self._server: asyncio.Server | None = None
        self._requests = 0
        self.metrics = CollectorRegistry(auto_describe=True)
        self.metrics.register(EngineCollector(self.engine, name))
        self.metrics.register(FaultCollector(self.faults))
        self._ttft = Histogram(
            "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ["model_name"],
            registry=self.metrics, buckets=TTFT_BUCKETS,
        ).labels(name)  # fmt: skip
        self._e2e = Histogram(
            "vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.", ["model_name"],
            registry=self.metrics, buckets=E2E_BUCKETS,
        ).labels(name)  # fmt: skip
        self._times = RequestTimes(self.metrics, name)

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
    def record_tokens(self, stream: _Stream, t: float, n: int, t_end: float) -> None:
        if self.truth is not None:
            self.truth.token(stream.rid, self.name, t, n, t_end)
        if stream.first_token is None:
            stream.first_token = t
            self._ttft.observe(t - stream.arrival)
            scheduled = stream.seq.scheduled_at if stream.seq is not None else None
            self._times.first_token(stream.arrival, scheduled, t)
            if self.truth is not None and scheduled is not None:
                self.truth.scheduled(stream.rid, self.name, scheduled, stream.cached_tokens)
                if self.profile.lora_adapters and stream.seq is not None:  # the model it asked for, a load it paid
                    self.truth.adapter(stream.rid, self.name, scheduled, stream.req.model, stream.seq.lora_loaded)

    def record_finish(self, stream: _Stream, t: float) -> None:
        self._e2e.observe(t - stream.arrival)
        self._times.finished(stream.first_token, t)
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
        framing = FRAMINGS.get(path)
        try:
            if framing is not None:
                if request.method != "POST":
                    raise ApiError(405, f"{request.method} not allowed on {path}", "MethodNotAllowed")
                self._generate(request, response, rid, framing)
                return
            if request.method != "GET":
                raise ApiError(405 if path in ("/health", "/metrics", "/v1/models") else 404, "not found", "NotFound")
            if path == "/health":
                response.send(200, b"", "text/plain", extra)
            elif path == "/metrics":
                response.send(200, generate_latest(self.metrics), CONTENT_TYPE_LATEST, extra)
            elif path == "/v1/models":
                response.send(200, models_body(self.name, self.profile), headers=extra)
            elif path in DISCOVERY_PATHS:  # what vLLM, TGI and Ollama answer about themselves
                response.send(200, discovery_body(path, self.name, self.profile) or b"{}", headers=extra)
            else:
                raise ApiError(404, f"no route for {path}", "NotFound")
        except ApiError as e:
            response.send(e.status, (framing or _OPENAI).error_body(e.status, e.message, e.type), headers=extra)

    def _generate(self, request: Request, response: Response, rid: str, framing: Framing) -> None:
        try:
            body = orjson.loads(request.body)
        except orjson.JSONDecodeError as e:
            raise ApiError(400, f"request body is not valid JSON: {e}") from None
        if not isinstance(body, dict):
            raise ApiError(400, "request body must be a JSON object")
        req = framing.parse(body)
        adapter = resolve_adapter(self.profile, self.name, req.model)  # a LoRA adapter's name, or the base's ""
        req.model = req.model or self.name

        plan = self.faults.draw(req.max_tokens, req.stream)
        if plan is not None and plan.reply is not None:
            if self.truth is not None:
                self.truth.arrival(rid, self.name, request.arrival, request.headers.get("traceparent", ""))
            self._fault_reply(response, rid, plan, framing)
            return
        offset, perturbed = self._requests, frozenset[int]()
        if req.greedy:
            offset, perturbed = self._greedy_output(req)
            if self.truth is not None:
                self.truth.output(rid, self.name, request.arrival, perturbed)
        s = _Stream(self, response, framing, req, rid, request.arrival, offset, plan, perturbed)
        if self.truth is not None and (s.reasoning_tokens or req.tool_call or req.tool_result):  # thinking; tools
            self.truth.reply(rid, self.name, request.arrival, s.reasoning_tokens, req.tool_call, req.tool_result)
        self._requests += 1
        try:
            s.seq = self.engine.submit(rid, req.words, req.max_tokens, s, req.priority, adapter)
        except RequestTooLargeError as e:
            raise ApiError(framing.invalid_status, str(e)) from None
        if self.truth is not None:
            self.truth.arrival(rid, self.name, request.arrival, request.headers.get("traceparent", ""))
        response.on_abort = s.abort
        s.begin()

    def _greedy_output(self, req: SimRequest) -> tuple[int, frozenset[int]]:
        """A greedy reply's vocabulary offset (the prompt's) and the positions this variant changes: each of the
        `max_tokens` positions with probability `perturb_share`, drawn from the seed, the variant and the prompt."""
        offset, digest = greedy_offset(req.words)
        share = self.profile.perturb_share
        if share <= 0.0:
            return offset, frozenset()
        draw = random.Random(f"{self.seed}:{self.name}:{digest}").random
        return offset, frozenset(i for i in range(req.max_tokens) if draw() < share)

    def _fault_reply(self, response: Response, rid: str, plan: FaultPlan, framing: Framing) -> None:
        """Answer with the error status ``plan.reply`` instead of running the request (after ``slow_headers_s``)."""
        fault = plan.reply
        assert fault is not None
        status, message, type_ = _FAULT_REPLIES[fault]
        headers = [("x-request-id", rid)]
        if fault == HTTP_429:
            headers.append(("retry-after", "1"))
        body = framing.error_body(status, message, type_)

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
