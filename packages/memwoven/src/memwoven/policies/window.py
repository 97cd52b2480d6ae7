"""Context windows: which messages of a history go into the prompt, under a message and/or token budget.

`window(messages, max_messages=..., max_tokens=..., tokenizer=...)` selects newest first, by *units*: a single
message, or an assistant message with tool calls together with the tool results that follow it (a call is never
split from its results). The pinned *head* is always kept: the leading system/developer messages, or the first
`keep_first` messages if more, and a summary message right after them (see `SummarizingChatMemory`). A tool
result belongs to the call it names, in the assistant message right before its run of tool results; any other
tool result is an orphan and is left out, so a window never starts with (or contains) an
orphaned tool result. System messages further down count as ordinary messages.

If even the newest unit does not fit beside the head, the window holds the head and that unit alone:
`Window.over_budget` is then True and an `OversizedTurnWarning` is issued. It is never empty while the history
has a usable message.

Cost: token counts are cached per message object (`MessageTokenCounter`) and selection stops at the first unit
that does not fit, so a window costs O(head + window), whatever the history's length. Nothing is deleted: the
history in storage is untouched.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from memwoven._steps import Runner, Steps, twins
from memwoven.contracts import ChatMemory, check_id
from memwoven.models import Message
from memwoven.policies._base import check_count, head_end, load_steps, unit_before, without_orphans
from memwoven.policies.tokens import MessageTokenCounter, TokenizerLike, token_counter

__all__ = ["ContextWindow", "OversizedTurnWarning", "Window", "window"]


class OversizedTurnWarning(UserWarning):
    """The newest turn alone exceeds the window's budget; it was returned anyway (with the pinned head)."""


@dataclass(frozen=True)
class Window:
    """The messages selected for a prompt, their token count, and what was left out."""

    messages: list[Message]
    """The selected messages, in conversation order: the head, then the newest units."""
    tokens: int
    """The tokens of the selected messages, as counted by the window's tokenizer."""
    over_budget: bool
    """True when the newest turn alone did not fit and was returned anyway (the only way to exceed a budget)."""
    omitted: int
    """How many messages of the history are not in the window (older ones and orphaned tool results)."""

    def __len__(self) -> int:
        return len(self.messages)

    def __iter__(self) -> Iterator[Message]:
        return iter(self.messages)


def window(
    messages: Sequence[Message],
    *,
    max_messages: int | None = None,
    max_tokens: int | None = None,
    tokenizer: TokenizerLike | MessageTokenCounter = None,
    keep_first: int = 0,
) -> Window:
    """Select the messages for a prompt: the pinned head, then the newest units that fit the budget.

    `tokenizer` is anything `memwoven.policies.token_counter` accepts (default: the offline estimator).
    See the module docstring for the rules.
    """
    check_count(max_messages, "max_messages", positive=True, optional=True)
    check_count(max_tokens, "max_tokens", positive=True, optional=True)
    check_count(keep_first, "keep_first")
    count = token_counter(tokenizer).count
    n = len(messages)
    head = head_end(messages, keep_first)
    selected = without_orphans(messages[:head])
    tokens = sum(map(count, selected))
    used = len(selected)
    picked: list[list[Message]] = []  # newest first
    over = (max_messages is not None and used > max_messages) or (max_tokens is not None and tokens > max_tokens)
    end = n
    while end > head:
        start, unit = unit_before(messages, end, head)
        if not unit:
            end = start
            continue
        cost = sum(map(count, unit))
        fits = (max_messages is None or used + len(unit) <= max_messages) and (
            max_tokens is None or tokens + cost <= max_tokens
        )
        if not fits and picked:
            break
        picked.append(unit)
        tokens += cost
        used += len(unit)
        end = start
        if not fits:
            over = True
            break
    for unit in reversed(picked):
        selected.extend(unit)
    if over:
        warnings.warn(
            OversizedTurnWarning(
                f"the newest turn does not fit the budget (max_messages={max_messages}, max_tokens={max_tokens}); "
                f"returning it alone with the pinned head ({used} messages, {tokens} tokens)"
            ),
            stacklevel=2,
        )
    return Window(selected, tokens, over, n - len(selected))


class Budget(Protocol):
    """The window budget an object keeps (`ContextWindow`, `MemoryManager`)."""

    max_messages: int | None
    max_tokens: int | None
    counter: MessageTokenCounter
    keep_first: int


def window_under(budget: Budget, messages: Sequence[Message]) -> Window:
    """`window` of `messages` under an object's budget."""
    return window(
        messages,
        max_messages=budget.max_messages,
        max_tokens=budget.max_tokens,
        tokenizer=budget.counter,
        keep_first=budget.keep_first,
    )


class ContextWindow(Runner):
    """A window over one session of a `ChatMemory`: `load()` / `aload()` read the session and select.

    With a `SummarizingChatMemory`, pass its `keep_first` so that the pinned messages and the summary after them
    stay in every window (`SummarizingChatMemory.context_window` does).
    """

    def __init__(
        self,
        memory: ChatMemory,
        session_id: str,
        *,
        max_messages: int | None = None,
        max_tokens: int | None = None,
        tokenizer: TokenizerLike | MessageTokenCounter = None,
        keep_first: int = 0,
    ) -> None:
        self.memory = memory
        self.session_id = check_id(session_id)
        self.max_messages = check_count(max_messages, "max_messages", positive=True, optional=True)
        self.max_tokens = check_count(max_tokens, "max_tokens", positive=True, optional=True)
        self.counter = token_counter(tokenizer)
        self.keep_first = check_count(keep_first, "keep_first")

    def __repr__(self) -> str:
        return (
            f"ContextWindow({self.memory!r}, {self.session_id!r}, max_messages={self.max_messages}, "
            f"max_tokens={self.max_tokens})"
        )

    def select(self, messages: Sequence[Message]) -> Window:
        """Apply this window's budget to `messages`."""
        return window_under(self, messages)

    def _load(self) -> Steps[Window]:
        """Read the session and select its window."""
        return self.select((yield from load_steps(self.memory, self.session_id)))

    load, aload = twins(_load)
