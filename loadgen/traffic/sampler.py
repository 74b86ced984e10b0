"""A seeded, replayable stream of synthetic requests drawn from the scenario's traffic mixes.

Request ``i`` of stream ``s`` depends only on (seed, s, i), so the same stream can be replayed against every
variant and any request regenerated on its own. Prompts are common English words (about one token each in real
tokenizers), so a prompt of N words is close to N tokens. Each prompt opens with a tag unique to the request, so
unrelated requests never share a cacheable prefix; the mix's system prompt, by contrast, is identical across all
of its requests, which is what prefix caching feeds on. A mix with ``unique_prefixes`` moves the tag to the very
front (before its system prompt and documents): the same text and lengths, with nothing shared. A mix with
``text: code`` cuts its questions from a block of code units instead of words (traffic/code_text.py: the same
one-token-per-unit rule, checked for code once per tokenizer; prose when a tokenizer cannot cut code exactly).

Mixes with structure: a mix with ``system_prompts: N`` > 1 has N seeded system prompts and each request draws one
uniformly (prompt 0 is the one a single-prompt mix has). A mix with ``documents`` has a seeded pool of documents,
each ``tokens`` words of the pool (each built once per sampler); a request carries ``per_request`` distinct ones
(fewer when its length leaves no room for them and a ``MIN_QUESTION_TOKENS`` question), drawn without replacement
with weight 1/rank**zipf, placed first in the prompt (before the request's tag), so system prompt + documents is a
real prefix of the request, shared with every request that drew the same documents in the same order.
``RequestSpec.shared_prefix_tokens`` counts it (system prompt + documents); these draws come from a second hash of
(seed, stream, index), so the rest of the request is drawn as for an unstructured mix.

Given the target model's tokenizer (``exact_lengths``), the lengths are exact instead: the words are only those
that are one token in that tokenizer, with and without a leading space. Such a word is its own pre-token (the
pre-tokenizer splits before each space), so a text of N such words separated by single spaces is exactly N tokens,
wherever the window onto the block starts or ends. The words are tokenized, and that rule checked on a long text
of them, once per tokenizer (when the scenario is validated); no request is ever tokenized. ``prompt_tokens``
then counts the system prompt's and the prompt's text tokens exactly; a chat server adds its template's tokens
(``template_overhead``).

A scenario's dataset (``traffic.dataset``) is replayed as one more mix: request ``i`` of stream ``s`` that draws
it takes row ``(offset(s) + i) mod n`` of the rows in an order seeded by the scenario's seed alone (a seeded
permutation, or the seeded sample), so every variant gets the same rows in the same order, streams start at
different places (users do not all send row 0 at once), and the open-loop stream walks the rows in order. Its
``max_tokens`` is the row's output length (or ``default_output_tokens``); a chat row keeps its messages; the bucket
is the row's length class (``LENGTH_CLASSES``); ``prompt_tokens`` counts the row's words (with a tokenizer, its
tokens), counted once when the sampler is built.

A scenario's priority classes (``traffic.classes``) are drawn by share from one more hash of (seed, stream,
index), apart from every other draw: the same request gets the same prompt, lengths and mix with classes or without,
and the same class from every sampler of the scenario, so variants and worker counts stay paired. A session's turns
keep the class of the request that opened it. A mix's images (``images``, traffic/images.py) are drawn the same way,
from a hash of their own: references to a pool of data URLs encoded once per sampler.

Generation runs on the load generator's event loop before every request, so it is a few slices of one
precomputed string, not a loop over words. The draws from a hash (traffic/draws.py), a mix's flattened table with
its shared text (traffic/mix_table.py) and the request drawn (traffic/request_spec.py) live in modules of their own.
"""

from __future__ import annotations

import copy
import hashlib
import math
import random
import struct
from itertools import accumulate
from typing import TYPE_CHECKING

from loadgen.config.agent import Agent
from loadgen.config.scenario import MixDef
from loadgen.config.traffic import MIN_QUESTION_TOKENS, Sessions
from loadgen.traffic.agent import AgentSession, AgentTask
from loadgen.traffic.code_text import CodeBlock, code_block
from loadgen.traffic.dataset_table import LENGTH_CLASSES, DatasetTable, length_class
from loadgen.traffic.draws import DRAWS, below, draw_distinct, pick, stable_int
from loadgen.traffic.images import image_plans
from loadgen.traffic.mix_table import MixTable, mix_table
from loadgen.traffic.mixes import resolve_mixes
from loadgen.traffic.replay import replay_rows
from loadgen.traffic.request_spec import RequestSpec
from loadgen.traffic.trace_agent import AgentTraceTable, Clock, TraceAgentSession, agent_trace_of
from loadgen.traffic.trace_file import trace_of
from loadgen.traffic.trace_table import TraceTable, blocks_text
from loadgen.traffic.words import WORDS

if TYPE_CHECKING:
    from loadgen.config.scenario import Scenario
    from loadgen.traffic.tokenizer import PromptTokenizer

__all__ = ["LENGTH_CLASSES", "WORDS", "DatasetTable", "RequestSampler", "RequestSpec", "length_class", "sampler_for"]


# Prompt text is a window, at a random offset, onto an endless repetition of one block of this many random words.
# A block, not a pool as long as the longest prompt: building a sampler (once per run, on the event loop) then costs
# a fixed 2048 words of time and memory, whatever the longest prompt.
_BLOCK_WORDS = 2048
# Fixed so the block, hence every prompt, is the same on every worker and in every run.
_POOL_SEED = 0x10AD6E4
# With a tokenizer, the request's tag is this many pool words (fewer when the prompt has fewer tokens).
_TAG_WORDS = 3


class RequestSampler:
    """Deterministic request stream: the same (seed, stream) always yields the same specs, in order.

    ``next()`` walks the stream; ``spec_at(i)`` is request ``i`` of it, computed on its own from a hash of
    (seed, stream, i). The draws are read straight from that hash: seeding a ``random.Random`` per request cost
    more than all the rest of ``spec_at`` (whose cost is the "request setup" row of ``python -m bench.hotpath``;
    with a tokenizer, ``python -m bench.tokenizer``).

    ``exact_lengths`` says whether ``prompt_tokens`` is exact in ``tokenizer``'s tokens (else words, approximately).
    """

    def __init__(
        self,
        mixes: dict[str, MixDef],
        weights: dict[str, float],
        seed: int,
        stream: int = 0,
        tokenizer: PromptTokenizer | None = None,
        datasets: dict[str, DatasetTable | TraceTable | AgentTraceTable] | None = None,
        sessions: dict[str, Sessions] | None = None,
        classes: dict[str, float] | None = None,
        agents: dict[str, Agent] | None = None,
    ) -> None:
        """``datasets``: mixes replayed from a dataset or a trace, by name (each with a weight, and no entry in
        ``mixes``). ``sessions``: the mixes sent as multi-turn sessions, by name. ``classes``: priority classes by
        name, each with its share (None or empty: no classes). ``agents``: the mixes sent as agent tasks, by name
        (traffic/agent.py)."""
        datasets = datasets or {}
        if not weights:
            raise ValueError("no mixes to draw from: weights is empty")
        for name, weight in weights.items():
            if name not in mixes and name not in datasets:
                raise ValueError(f"mix {name!r} has a weight but no definition; defined: {sorted(mixes)}")
            if not (weight > 0 and math.isfinite(weight)):
                raise ValueError(f"mix {name!r} has weight {weight!r}; weights must be finite and > 0")
        self.seed = seed
        self.stream = stream
        self.sessions = sessions or {}
        self.agents = agents or {}
        self.tokenizer = tokenizer
        self.exact_lengths = tokenizer is not None
        pool = WORDS if tokenizer is None else tokenizer.one_token_words()
        self._words = pool
        self._next_index = 0
        self._prefix = f"{seed}\x1f{stream}\x1f"
        # Sorted, so the stream does not depend on the order mixes were listed in.
        names = sorted(weights)
        self._mix_cum = list(accumulate(weights[name] for name in names))
        self._tables: list[MixTable | DatasetTable | TraceTable | AgentTraceTable] = []
        for name in names:
            if name in datasets:
                replayed = datasets[name]
                if isinstance(replayed, TraceTable | AgentTraceTable) and tokenizer is not None:
                    replayed.overhead = tokenizer.chat_template_overhead(system=False)
                self._tables.append(replayed)
                continue
            table = mix_table(name, mixes[name], seed, pool)  # its system prompts and documents, for every stream
            if tokenizer is not None:
                table.overhead = tokenizer.chat_template_overhead(system=bool(table.system_prompt))
            self._tables.append(table)
        words = random.Random(_POOL_SEED).choices(pool, k=_BLOCK_WORDS)
        # The block (each word followed by one space) and the character offset of every word in it, so a window
        # of n words is one slice, or a few pieces when it wraps around the block.
        self._block = " ".join(words) + " "
        self._block_starts = [0, *accumulate(len(word) + 1 for word in words)]
        # `text: code` mixes cut their questions from one block of code units instead (None: this tokenizer cannot
        # cut code exactly, so they keep prose); `unique_prefixes` mixes put the request's tag first.
        code_mixes = [n for n in names if n not in datasets and mixes[n].text == "code"]
        code = code_block(_BLOCK_WORDS, _POOL_SEED, tokenizer) if code_mixes else None
        self._code_blocks: dict[str, CodeBlock] = dict.fromkeys(code_mixes, code) if code is not None else {}
        self._unique_prefixes = {n for n in names if n not in datasets and mixes[n].unique_prefixes}
        self._row_offset = self._offset(stream)
        # Sorted like the mixes, so a request's class does not depend on the order the classes were listed in.
        # One class needs no draw; several draw from a hash of their own (see `spec_at`).
        self._class_names = sorted(classes or {})
        for name in self._class_names:
            share = (classes or {})[name]
            if not (share > 0 and math.isfinite(share)):
                raise ValueError(f"class {name!r} has share {share!r}; shares must be finite and > 0")
        several = len(self._class_names) > 1
        self._class_cum = list(accumulate((classes or {})[n] for n in self._class_names)) if several else []
        self._only_class = self._class_names[0] if len(self._class_names) == 1 else ""
        self._image_plans = image_plans({n: mixes[n] for n in names if n not in datasets}, seed)

    def _offset(self, stream: int) -> int:
        """Where stream ``stream`` starts in the dataset rows (one offset for all of them: a 64-bit draw)."""
        return stable_int("dataset", self.seed, stream) >> 64

    def template_overhead(self, mix: str) -> int | None:
        """Prompt tokens a chat server adds to each request of ``mix`` beyond ``prompt_tokens`` (its chat
        template's markers), computed from the tokenizer's template; None without a tokenizer or template."""
        for table in self._tables:
            if table.name == mix:
                return table.overhead
        raise KeyError(mix)

    def with_stream(self, stream: int) -> RequestSampler:
        """The same scenario's stream ``stream``, sharing this sampler's precomputed text.

        Building a sampler costs the word block and the mixes' system prompts; a fork costs a copy of a few
        references, and shares the block's memory.
        """
        fork = copy.copy(self)
        fork.stream = stream
        fork._next_index = 0
        fork._prefix = f"{self.seed}\x1f{stream}\x1f"
        fork._row_offset = self._offset(stream)
        return fork

    def next(self) -> RequestSpec:
        """The next request of this stream."""
        spec = self.spec_at(self._next_index)
        self._next_index += 1
        return spec

    def spec_at(self, index: int) -> RequestSpec:
        """Request ``index`` of this stream (the same as the ``index``-th ``next()``, counting from 0)."""
        spec = self._spec_at(index)
        if self._class_cum:
            # A draw of its own (from (seed, stream, index) like the others, hashed apart): the request's prompt,
            # lengths and mix are the same with classes or without, whatever the classes and their shares.
            d_class = hashlib.blake2b(f"{self._prefix}{index}\x1fc".encode(), digest_size=8).digest()
            spec.priority_class = self._class_names[pick(int.from_bytes(d_class, "big"), self._class_cum)]
        elif self._only_class:
            spec.priority_class = self._only_class
        if self._image_plans and spec.mix in self._image_plans:  # a draw of its own too
            spec.images = self._image_plans[spec.mix].draw(f"{self._prefix}{index}")
        return spec

    def _spec_at(self, index: int) -> RequestSpec:
        digest = hashlib.blake2b(f"{self._prefix}{index}".encode(), digest_size=DRAWS.size).digest()
        d_mix, d_bucket, d_len, d_out, d_start, d_tag = DRAWS.unpack(digest)
        table = self._tables[pick(d_mix, self._mix_cum)]
        if isinstance(table, TraceTable):
            # The open-loop stream (0) walks the trace in order, row k at arrival k; other streams start apart.
            row = index % len(table) if self.stream == 0 else (self._row_offset + index) % len(table)
            bucket, tokens, out, shared = table.parts(row)
            prompt = table.prompt(row, self._words, self._window, _BLOCK_WORDS)
            return RequestSpec(index, table.name, bucket, "", prompt, tokens, out, shared_prefix_tokens=shared)
        if isinstance(table, AgentTraceTable):  # a recorded agent session opens its task, walked like a trace's rows
            row = index % len(table) if self.stream == 0 else (self._row_offset + index) % len(table)
            return table.first_spec(self, index, row)
        if isinstance(table, DatasetTable):
            rows = table.rows
            bucket, system, prompt, messages, tokens, out, reference = rows[(self._row_offset + index) % len(rows)]
            return RequestSpec(index, table.name, bucket, system, prompt, tokens, out, messages, reference=reference)
        bucket, lo, hi = table.buckets[pick(d_bucket, table.cum_weights)]
        prompt_tokens = lo + below(d_len, hi - lo + 1)
        out_lo, out_hi = table.output
        max_tokens = out_lo + below(d_out, out_hi - out_lo + 1)
        # The tag opens the question; the rest come from the pool at a random offset.
        user_words = prompt_tokens - table.system_words
        system_prompt = table.system_prompt
        docs_text = ""
        shared = table.system_words
        if table.structured:
            extra = hashlib.blake2b(f"{self._prefix}{index}\x1fs".encode(), digest_size=64).digest()
            draws = list(struct.unpack(">8Q", extra))
            system_prompt = table.system_prompts[below(draws[0], len(table.system_prompts))]
            n_docs = (
                min(table.per_request, max(0, (user_words - MIN_QUESTION_TOKENS) // table.doc_words))
                if table.documents
                else 0
            )
            if n_docs:
                draws = draws[1:]
                while len(draws) < n_docs:  # more than 7 documents: more draws, from further hashes
                    more = hashlib.blake2b(f"{self._prefix}{index}\x1fs{len(draws)}".encode(), digest_size=64)
                    draws += struct.unpack(">8Q", more.digest())
                picked = draw_distinct(draws, len(table.documents), n_docs, table.doc_weights, table.doc_cum)
                docs_text = " ".join([table.documents[j] for j in picked]) + " "
                user_words -= n_docs * table.doc_words
                shared += n_docs * table.doc_words
        if self.exact_lengths:
            # Pool words (one token each), so the tag's length is exact too: 3 words of ~450, ~10^8 tags.
            words = self._words
            n = len(words)
            tag_words = min(_TAG_WORDS, user_words)
            tag = " ".join([words[(d_tag >> (21 * k)) % n] for k in range(tag_words)])
        else:
            tag_words = 1
            tag = f"r{d_tag & 0xFFFFFF:06x}-{index}"
        body_words = user_words - tag_words
        code = self._code_blocks.get(table.name)
        if body_words <= 0:
            rest, sep = "", ""
        elif code is not None:  # each code unit opens with its own space or line break
            rest, sep = code.window(below(d_start, _BLOCK_WORDS), body_words), ""
        else:
            rest, sep = self._window(below(d_start, _BLOCK_WORDS), body_words), " "
        if table.name in self._unique_prefixes and (system_prompt or docs_text):
            # The tag first, so no two requests share a cacheable prefix; the same text and lengths otherwise.
            if system_prompt:
                system_prompt, head = f"{tag} {system_prompt}", docs_text.rstrip(" ")
            else:
                head = f"{tag} {docs_text}".rstrip(" ")
            shared = 0
        else:
            head = docs_text + tag
        question = f"{head}{sep}{rest}" if head and rest else head or rest
        spec = RequestSpec(
            index,
            table.name,
            bucket,
            system_prompt,
            question,
            prompt_tokens,
            max_tokens,
            shared_prefix_tokens=shared,
        )
        sessions = self.sessions.get(table.name)
        if sessions is not None:  # the request opens a session: how many turns it has, from a hash of its own
            low, high = sessions.turns
            spec.turn, spec.turns = 1, low + below(self._turn_draws(index, 1)[0], high - low + 1)
        agent = self.agents.get(table.name)
        if agent is not None:  # the request opens an agent's task: its steps, from the task's own draws
            low, high = agent.steps
            spec.turn, spec.turns = 1, low + below(self.agent_draws(index, "", 0)[0], high - low + 1)
        return spec

    def agent_task(self, spec: RequestSpec) -> AgentTask | None:
        """The agent task ``spec`` opens: a synthetic agent's (`traffic.mixes[].agent`) or a recorded session of
        `traffic.agent_trace`; None when it opens none."""
        if spec.turn != 1:
            return None
        agent = self.agents.get(spec.mix)
        if agent is not None:
            return AgentSession(self, agent, spec)
        table = next((t for t in self._tables if t.name == spec.mix), None)
        if isinstance(table, AgentTraceTable):
            row = spec.index % len(table) if self.stream == 0 else (self._row_offset + spec.index) % len(table)
            return TraceAgentSession(self, table.sessions[row], spec, table.block_tokens, table.clock)
        return None

    def blocks_text(self, blocks: list[tuple[object, int]]) -> str:
        """The text of (block key, tokens) blocks: a key's block is the same text wherever it appears (a trace's
        hash ids: traffic/trace_table.py)."""
        return blocks_text(blocks, self._words, self._window, _BLOCK_WORDS)

    def agent_draws(self, index: int, branch: str, step: int, salt: str = "") -> tuple[int, ...]:
        """Six draws for step ``step`` of the agent task ``index`` opens (``branch``: "" the task's top-level agent,
        else its sub-agent's path), apart from every other draw of the request (traffic/agent.py)."""
        key = f"{self._prefix}{index}\x1fa{branch}/{step}{salt}"
        return DRAWS.unpack(hashlib.blake2b(key.encode(), digest_size=48).digest())

    def system_tokens(self, mix: str) -> int:
        """The length of the mix's system prompt (words; with a tokenizer, its tokens)."""
        table = next(t for t in self._tables if t.name == mix)
        assert isinstance(table, MixTable)
        return table.system_words

    def output_range(self, mix: str) -> tuple[int, int]:
        """The mix's [min, max] max_tokens."""
        table = next(t for t in self._tables if t.name == mix)
        assert isinstance(table, MixTable)
        return table.output

    def joiner(self, mix: str) -> str:
        """What joins two texts of the mix's kind without adding a token: a space between prose, nothing between
        code (each code unit opens with its own whitespace)."""
        return "" if mix in self._code_blocks else " "

    def filler(self, mix: str, draw: int, n_words: int) -> str:
        """``n_words`` words (with a tokenizer, exactly that many tokens) of the mix's kind of text (code or prose)
        from a point ``draw`` picks: an agent's tool results and summaries."""
        if n_words <= 0:
            return ""
        code = self._code_blocks.get(mix)
        if code is not None:
            return code.window(below(draw, _BLOCK_WORDS), n_words)
        return self._window(below(draw, _BLOCK_WORDS), n_words)

    def _turn_draws(self, index: int, turn: int) -> tuple[int, ...]:
        # Apart from the request's own draws, so a mix's requests are the same with sessions on or off.
        return DRAWS.unpack(hashlib.blake2b(f"{self._prefix}{index}\x1ft{turn}".encode(), digest_size=48).digest())

    def follow_up(self, spec: RequestSpec, turn: int) -> tuple[str, int, int]:
        """Turn ``turn`` (>= 2) of the session ``spec`` opens: the new user message, its length (words; with a
        tokenizer, exactly its tokens) and the turn's ``max_tokens``, from (seed, stream, index, turn) alone."""
        d_len, d_out, d_start, _, _, _ = self._turn_draws(spec.index, turn)
        low, high = self.sessions[spec.mix].follow_up_tokens
        n_words = low + below(d_len, high - low + 1)
        table = next(t for t in self._tables if t.name == spec.mix)
        assert isinstance(table, MixTable)  # datasets have no sessions (the config refuses them)
        out_lo, out_hi = table.output
        return (
            self._window(below(d_start, _BLOCK_WORDS), n_words),
            n_words,
            out_lo + below(d_out, out_hi - out_lo + 1),
        )

    def document_indices(self, spec: RequestSpec) -> list[int]:
        """The pool indices of the documents ``spec`` carries, in prompt order (for tests and analysis; not the
        hot path)."""
        table = next(t for t in self._tables if t.name == spec.mix)
        if not isinstance(table, MixTable) or not table.documents:
            return []
        n_docs = (spec.shared_prefix_tokens - table.system_words) // table.doc_words
        words = spec.prompt.split(" ")
        index = {doc: j for j, doc in enumerate(table.documents)}
        w = table.doc_words
        return [index[" ".join(words[i * w : (i + 1) * w])] for i in range(n_docs)]

    def _window(self, first: int, n_words: int) -> str:
        """``n_words`` words of the endlessly repeated block, from word ``first`` (< block size) on."""
        block, starts = self._block, self._block_starts
        laps, end = divmod(first + n_words, _BLOCK_WORDS)
        if laps == 0:
            return block[starts[first] : starts[end] - 1]
        # The joined pieces end with the space after the last word (or are one full block when end == 0).
        return "".join([block[starts[first] :], *([block] * (laps - 1)), block[: starts[end]]])[:-1]


def sampler_for(scenario: Scenario, stream: int) -> RequestSampler:
    """The request stream ``stream`` of ``scenario``: its mixes, weights and seed."""
    traffic = scenario.traffic
    replay, trace, agent_trace = traffic.dataset, traffic.trace, traffic.agent_trace
    replayed = {r.name for r in (replay, trace, agent_trace) if r is not None}
    if replayed:  # a dataset or a trace is no MixDef: resolve the others
        traffic = traffic.model_copy(update={"mixes": [ref for ref in traffic.mixes if ref.name not in replayed]})
    mixes = resolve_mixes(traffic)
    weights = {ref.name: ref.weight for ref in scenario.traffic.mixes}
    tokenizer = None
    if scenario.tokenizer is not None:
        from loadgen.traffic.tokenizer import load_tokenizer

        tokenizer = load_tokenizer(scenario.tokenizer)  # loaded (and checked) once per process, at validation
    datasets: dict[str, DatasetTable | TraceTable | AgentTraceTable] = {}
    if agent_trace is not None:  # read by the preflight
        sessions_read = agent_trace_of(agent_trace)
        datasets[agent_trace.name] = AgentTraceTable(
            agent_trace.name, sessions_read, agent_trace.block_tokens, Clock.of(agent_trace)
        )
    if trace is not None:
        datasets[trace.name] = TraceTable(trace.name, trace_of(trace), trace.block_tokens)  # read by the preflight
    if replay is not None:
        table = DatasetTable(
            replay.name,
            replay_rows(replay),  # read once per process, by the preflight step before load
            scenario.seed,
            replay.default_output_tokens,
            replay.sample,
            replay.replace,
            tokenizer,
        )
        datasets[replay.name] = table
    sessions = {ref.name: ref.sessions for ref in scenario.traffic.mixes if ref.sessions is not None}
    classes = {c.name: c.share for c in scenario.traffic.classes}
    agents = {ref.name: ref.agent for ref in scenario.traffic.mixes if ref.agent is not None}
    return RequestSampler(mixes, weights, scenario.seed, stream, tokenizer, datasets, sessions, classes, agents)
