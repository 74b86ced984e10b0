"""The generation routes of one simulated variant, and the set of variant servers of a simulator run.

Every variant speaks the OpenAI, TGI and Ollama framings (``loadgen.sim.framings`` builds their bytes); this module
routes each request to its framing and keeps the variant's books (metrics, truth log), and each request in flight
(``loadgen.sim.stream.RequestStream``) times the bytes. Streams start as soon as the request is accepted (the head,
with vLLM's role-only chunk for OpenAI chat), then everything an engine step produced for the request leaves in one
write, the last step with the stream's end. Which variants a run serves: ``loadgen.sim.variant_spec``.

A variant's ``FaultSpec`` (``loadgen.sim.faults``) bends this on purpose, on every route: error statuses, resets,
cut or corrupted streams, mid-stream error events, stalls and slow headers, each logged to the truth log and counted
in ``loadgen_sim_faults_total``.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from pathlib import Path

import orjson
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from loadgen.sim.discovery import DISCOVERY_PATHS, discovery_body
from loadgen.sim.engine import Engine, RequestTooLargeError
from loadgen.sim.faults import (
    HTTP_429,
    HTTP_500,
    HTTP_503,
    JSON_ERROR_ON_STREAM,
    SLOW_HEADERS,
    FaultInjector,
    FaultPlan,
    FaultSpec,
)
from loadgen.sim.framings import DEFAULT_MAX_TOKENS, FRAMINGS, ApiError, Framing, SimRequest, greedy_offset
from loadgen.sim.http import Request, Response, serve_http
from loadgen.sim.lora import models_body, resolve_adapter
from loadgen.sim.metrics import E2E_BUCKETS, TTFT_BUCKETS, EngineCollector, FaultCollector, RequestTimes
from loadgen.sim.profiles import SimProfile
from loadgen.sim.stream import RequestStream
from loadgen.sim.truth import TruthLog
from loadgen.sim.variant_spec import VariantSpec

__all__ = ["DEFAULT_MAX_TOKENS", "SimCluster", "VariantServer"]

_OPENAI = FRAMINGS["/v1/chat/completions"]  # the shape of errors on routes outside any framing


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

    # ---- bookkeeping called by RequestStream ----
    def record_tokens(self, stream: RequestStream, t: float, n: int, t_end: float) -> None:
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

    def record_finish(self, stream: RequestStream, t: float) -> None:
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
        s = RequestStream(self, response, framing, req, rid, request.arrival, offset, plan, perturbed)
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
