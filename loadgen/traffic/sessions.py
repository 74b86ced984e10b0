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
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from loadgen.traffic.sampler import RequestSpec

if TYPE_CHECKING:
    from loadgen.traffic.sampler import RequestSampler

__all__ = ["Conversation"]


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
