"""Multi-turn sessions: one user's conversation, whose history grows with the model's actual replies.

A mix sent with ``sessions`` (``traffic.mixes[].sessions``) opens a session with every request it draws: turn 1 is
that request as the mix makes it (``RequestSpec.turn == 1``, ``turns`` the session's length). Each later turn sends
the whole conversation so far: the system prompt, every user message, and after each the reply the variant
actually streamed (its text, as the stream kept it), then a new user message. The user messages, their lengths,
every turn's ``max_tokens`` and the number of turns come from (seed, stream, index, turn) alone
(``RequestSampler.follow_up``), so every variant gets the same sessions; only the replies, hence the history, are
each variant's own.

``prompt_tokens`` (the target) of turn k is turn k-1's plus the reply's tokens (the server's count) plus the new
message's: exact on a server that bills the messages' tokens and nothing else (the simulator), and short by the
chat template's markers per added message elsewhere (the report states turn 1's template overhead only).
``shared_prefix_tokens`` of a follow-up is the previous turn's prompt: the server has seen it word for word, so a
prefix cache can serve it.

An agentic session (a session mix with ``tools``): a turn whose reply was a tool call is followed by the call as the
assistant's message (``tool_calls``: its id, name and arguments as streamed) and the tool's result (``role: tool``,
``tool_call_id`` the call's) in place of the next user message; the result's text is the follow-up message the
turn would have sent (same seeded words and length).

Pure state on the hot path (a list of messages grows by two per turn): no I/O, no sleeping; the Locust user sends
the turns and waits the think time between them.

Sessions on the wire (`variants[].routing`, config/routing.py): `session_id` names a session for a router, and
`SessionHeaders` writes a stream's session headers turn by turn — the id, and the token the router handed back on
the session's latest turn.
"""

from __future__ import annotations

import copy
import re
from typing import TYPE_CHECKING, Any, cast

from loadgen.traffic.sampler import RequestSpec

if TYPE_CHECKING:
    from loadgen.config.routing import Routing
    from loadgen.traffic.sampler import RequestSampler

__all__ = ["Conversation", "SessionHeaders", "session_id"]

# A header value worth sending back: visible ASCII, spaces inside only (what a router's token is; anything else,
# a control character or a value the request head cannot carry as written, is not replayed).
_TOKEN_VALUE = re.compile(r"[\x21-\x7e](?:[ \t\x21-\x7e]*[\x21-\x7e])?")


def session_id(seed: int, stream: int, index: int, branch: str = "") -> str:
    """The id of the session that request `index` of stream `stream` opens: its pair key (measure/pairs.py), so the
    same session has the same id on every variant; unique across users and workers, as (stream, index) is (closed
    loop: the stream holds the worker's index; open loop: the index is the schedule's, all workers together); and
    the same in every run of the seed, as its prompts are. An agent task's sub-agent (`branch`, its path: "1",
    "1.2") is a session of its own: the task's id with its path."""
    return f"lg-{seed}-{stream}-{index}" + (f"-b{branch}" if branch else "")


class SessionHeaders:
    """The session headers of one request stream's requests: `head(spec)` is what a turn adds to its request head
    (nothing for a request outside a session), `took(spec, token)` hands over what the response's header `wants(spec)`
    named held. A stream runs one session at a time; a turn of another session than the last one starts afresh, so no
    session's token ever rides on another's requests."""

    __slots__ = ("_capture", "_seed", "_stream", "_id_name", "_parent_name", "_replay", "_index", "_lines", "_token")

    def __init__(self, routing: Routing, seed: int, stream: int) -> None:
        self._capture = routing.token_header  # the response header to capture (None: nothing is)
        self._seed = seed
        self._stream = stream
        self._id_name = None if routing.session_header is None else routing.session_header.encode("ascii")
        self._parent_name = None if routing.parent_header is None else routing.parent_header.encode("ascii")
        self._replay = None if routing.replay_header is None else routing.replay_header.encode("ascii")
        self._index: tuple[int, str] = (-1, "")  # the session of the last turn seen (index, sub-agent path)
        self._lines = b""  # its id header line
        self._token = b""  # its token header line, once a response brought one

    def fresh(self) -> SessionHeaders:
        """The same headers for another stream of the same requests (an agent's sub-agent), with no session yet."""
        twin = copy.copy(self)
        twin._index, twin._lines, twin._token = (-1, ""), b"", b""
        return twin

    def head(self, spec: RequestSpec) -> bytes:
        """The header lines `spec` carries: a session's id (a sub-agent's, and its parent's) and its latest token; b""
        outside a session."""
        if not spec.turns:
            return b""
        key = (spec.index, spec.branch)
        if spec.turn == 1 or key != self._index:
            self._index = key
            self._token = b""
            name = self._id_name
            lines = b""
            if name is not None:
                value = session_id(self._seed, self._stream, spec.index, spec.branch)
                lines = name + b": " + value.encode("ascii") + b"\r\n"
                if spec.branch and self._parent_name is not None:
                    parent = session_id(self._seed, self._stream, spec.index, spec.branch.rpartition(".")[0])
                    lines += self._parent_name + b": " + parent.encode("ascii") + b"\r\n"
            self._lines = lines
        return self._lines + self._token

    def wants(self, spec: RequestSpec) -> str | None:
        """The response header to capture for `spec`: a turn with a next one, when a token header is set."""
        return self._capture if spec.turns and spec.turn < spec.turns else None

    def took(self, spec: RequestSpec, token: str | None) -> None:
        """The response to `spec` held `token` in the captured header (None: it did not): the session's next turns
        carry it, until a later response brings another."""
        if token is None or (spec.index, spec.branch) != self._index or self._replay is None:
            return
        token = token.strip()
        if _TOKEN_VALUE.fullmatch(token):
            self._token = self._replay + b": " + token.encode("ascii") + b"\r\n"


class Conversation:
    """The session ``first`` opens (a spec with ``turn == 1``), on the stream ``sampler`` walks.

    ``reply(text, tokens)`` hands it the reply to the last turn sent and returns the next turn's spec, or None once
    the session is over. The caller ends the session early (drops the object) when a turn fails.
    """

    __slots__ = ("first", "think_time", "_sampler", "_messages", "_last")

    def __init__(self, sampler: RequestSampler, first: RequestSpec) -> None:
        if first.turn != 1:
            raise ValueError(f"request {first.index} of mix {first.mix!r} opens no session (turn {first.turn})")
        self.first = first
        self.think_time = sampler.sessions[first.mix].think_time
        self._sampler = sampler
        if first.messages is not None:
            self._messages = list(first.messages)
        else:
            self._messages = [{"role": "system", "content": first.system_prompt}] if first.system_prompt else []
            self._messages.append({"role": "user", "content": first.prompt})
        self._last = first

    @property
    def turn(self) -> int:
        """The last turn handed out (1 right after the session opened)."""
        return self._last.turn

    @property
    def over(self) -> bool:
        """Whether the last turn handed out is the session's last."""
        return self._last.turn >= self.first.turns

    def reply(self, text: str, tokens: int, tool_call: dict[str, str] | None = None) -> RequestSpec | None:
        """The next turn, after the reply ``text`` (``tokens`` long, by the server's count) to the last one, or
        after its ``tool_call`` ({id, name, arguments}: the next turn sends the tool's result)."""
        last = self._last
        if last.turn >= self.first.turns:
            return None
        turn = last.turn + 1
        message, words, max_tokens = self._sampler.follow_up(self.first, turn)
        # A reply the stream kept no text (or call) of adds nothing to the history, so it adds no tokens either: the
        # target counts what is sent.
        called = tool_call is not None and bool(tool_call["id"])
        if tool_call is not None and called:
            # The chat API's shapes (content null, a list of calls): the dialect sends the messages as they are.
            fn = {"name": tool_call["name"], "arguments": tool_call["arguments"]}
            call = {"id": tool_call["id"], "type": "function", "function": fn}
            said: dict[str, Any] = {"role": "assistant", "content": text or None, "tool_calls": [call]}
            self._messages.append(cast(dict[str, str], said))
            self._messages.append({"role": "tool", "tool_call_id": tool_call["id"], "content": message})
        else:
            self._messages.append({"role": "assistant", "content": text})
            self._messages.append({"role": "user", "content": message})
        first = self.first
        spec = RequestSpec(
            first.index,
            first.mix,
            first.bucket,
            first.system_prompt,
            # For servers that take one prompt: the conversation after the system prompt, a message a line.
            "\n".join(m["content"] or "" for m in self._messages[1 if first.system_prompt else 0 :]),
            last.prompt_tokens + (tokens if text or called else 0) + words,
            max_tokens,
            tuple(self._messages),
            shared_prefix_tokens=last.prompt_tokens,
            turn=turn,
            turns=first.turns,
            priority_class=first.priority_class,
        )
        self._last = spec
        return spec
