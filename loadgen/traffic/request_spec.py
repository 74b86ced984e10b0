"""One request to send, as the sampler draws it (traffic/sampler.py) and the user sends it: built on the hot path,
hence a plain slotted dataclass."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loadgen.traffic.references import Reference

__all__ = ["RequestSpec"]


@dataclass(slots=True)
class RequestSpec:
    """One request to send: built on the hot path, hence a plain slotted dataclass."""

    index: int
    mix: str
    bucket: str
    system_prompt: str  # "" when the mix has none
    prompt: str
    # Target length: words in system_prompt + words in prompt; with a tokenizer, exactly their text tokens.
    prompt_tokens: int
    max_tokens: int
    # A dataset's chat row: every message as sent ({role, content}); system_prompt and prompt then hold the same
    # text for servers that take a raw prompt. None: the chat is system_prompt + prompt.
    messages: tuple[dict[str, str], ...] | None = None
    # The leading part of the prompt a prefix cache could reuse across requests: the system prompt plus the
    # documents, in the same unit as prompt_tokens (the first this-many words / tokens of system_prompt, then
    # prompt). 0 for dataset rows (their sharing is unknown).
    shared_prefix_tokens: int = 0
    # Multi-turn sessions (traffic/sessions.py): this request's turn, 1 the opening one (0: not in a session), and
    # the turns its session has (0: not in a session).
    turn: int = 0
    turns: int = 0
    # Its priority class (`traffic.classes`; a session's turns all keep their opening request's); "": the
    # scenario has none, so every request is of the one implicit class.
    priority_class: str = ""
    # A dataset row's reference answer (`expected`), judged against the reply where replies are kept (`quality:`).
    reference: Reference | None = None
    # An agent task's sub-agent this request belongs to (traffic/agent.py): "" the task's top-level agent (and every
    # request outside an agent task), else its path ("1", "1.2": the first sub-agent's second own sub-agent).
    branch: str = ""
    # Its images as data URLs (the pool's shared strings; `images` of its mix); None: its mix carries none.
    images: tuple[str, ...] | None = None
