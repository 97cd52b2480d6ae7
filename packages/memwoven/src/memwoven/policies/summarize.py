"""`SummarizingChatMemory`: a `ChatMemory` that compacts a session into pinned + summary + recent messages.

When a write leaves a session past its `trigger` (a message count and/or a token count), the *middle* of the
history (after the first `keep_first` messages, before the last `keep_recent`, never splitting a tool call from
its results, and never taking a tool call whose results have not all arrived) goes to the summarizer, and the
session is saved, in one atomic save under the version it was read at, as::

    pinned messages + one summary message (role "system", metadata {"memwoven_summary": {...}}) + recent messages

Repeated compaction layers summaries: the previous summary message is the first message of the next middle, so
the summarizer merges it. The summarized original messages are appended to the archive session
``<id>:archive`` (unless ``archive=False``), where `archived(id)` reads them back; summaries are not archived.

The summarizer is any callable from a list of messages to text, sync or async; if it accepts a `session_id`
keyword it gets ``<id>:summarizer``, so anything it records lives in its own session and never touches the
parent. Adapters subclass `Summarizer` (``langchain_memwoven.summarizer_from_chat_model``,
``llama_index.storage.chat_store.memwoven.summarizer_from_llm``). If compacting after a write fails (the
summarizer raises or returns no text, or the compaction cannot be saved), the write raises `SummarizationError`
with ``stored=True`` and the cause attached: the write itself is stored, so a caller must not retry it, and the
history is left as it was after it: there is no fallback that drops messages. A failed compaction is tried again
by the next write, or by `compact(id)` (whose `SummarizationError` has ``stored=False``).

Concurrency: the compaction saves with the version it planned from; if another writer got in first it plans
again (reusing the summary when the middle is unchanged), and never archives a message twice. Only two
processes compacting the same session at the same moment, or a crash between the archive append and the save,
can leave a message in the archive twice (never lost).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Union

from memwoven._steps import Call, Runner, Steps, async_twin, twins
from memwoven.contracts import ChatMemory, check_id
from memwoven.errors import ConcurrentModificationError, InvalidInputError
from memwoven.models import ImagePart, Message, OpaquePart, TextPart
from memwoven.policies._base import (
    ARCHIVE_SUFFIX,
    SUMMARIZER_SUFFIX,
    SUMMARY_KEY,
    PolicyError,
    WrappingChatMemory,
    archive_steps,
    archived_steps,
    call_async,
    call_sync,
    check_count,
    group_end,
    group_start,
    is_summary,
    not_yet_archived,
    pending_call_start,
)
from memwoven.policies.tokens import MessageTokenCounter, TokenizerLike, token_counter
from memwoven.policies.window import ContextWindow

__all__ = [
    "SUMMARY_KEY",
    "SUMMARY_PROMPT",
    "SummarizationError",
    "Summarizer",
    "SummarizerLike",
    "SummarizingChatMemory",
    "Trigger",
    "is_summary",
    "render_transcript",
]

SUMMARY_PROMPT = (
    "You summarize the earlier part of a conversation between a user and an AI assistant; your summary replaces "
    "those messages in the assistant's memory. Keep every fact, decision, preference, name, number, open question "
    "and tool result that later turns may need; drop greetings and filler. If the transcript starts with an "
    "earlier summary, merge it into yours. Answer with the summary only: short paragraphs or bullet points."
)
"""The instructions the adapters' summarizers give the model, before the transcript."""

SUMMARY_PREFIX = "Summary of the earlier conversation:\n"


class SummarizationError(PolicyError):
    """Summarizing failed: the summarizer raised (the cause is attached) or returned no text.

    `stored` says whether the write that triggered the compaction was stored (then do not retry that write).
    """


class Summarizer(Runner):
    """Base class of summarizers with a sync and an async path (what the adapters return).

    Subclasses implement `__call__`; `acall` defaults to running it in a thread.
    """

    def __call__(self, messages: list[Message], *, session_id: str | None = None) -> str:
        """Summarize `messages`; `session_id` is the summarizer's own session (``<id>:summarizer``)."""
        raise NotImplementedError

    acall = async_twin(__call__)


SummarizerLike = Union[Summarizer, Callable[..., Union[str, Awaitable[str]]]]
"""A `Summarizer`, or any callable ``messages -> text`` (or ``-> awaitable text``)."""


def _part_text(part: TextPart | ImagePart | OpaquePart) -> str:
    if isinstance(part, TextPart):
        return part.text
    if isinstance(part, ImagePart):
        return f"[image: {part.url}]" if part.url else "[image]"
    return f"[{part.kind}]"


def render_transcript(messages: Sequence[Message]) -> str:
    """A plain-text transcript of messages for a summarizing model: one block per message, tool calls included."""
    blocks = []
    for message in messages:
        speaker = message.role if not message.name else f"{message.role} ({message.name})"
        if is_summary(message):
            speaker = "earlier summary"
        elif message.role == "tool":
            speaker = f"tool result ({message.name or message.tool_call_id or 'tool'})"
        text = message.content if isinstance(message.content, str) else " ".join(map(_part_text, message.content))
        lines = [f"{speaker}: {text}".rstrip()] if text or not message.tool_calls else []
        for call in message.tool_calls:
            arguments = json.dumps(call.arguments, ensure_ascii=False, separators=(",", ":"))
            lines.append(f"{speaker} called {call.name}({arguments})")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


@dataclass(frozen=True)
class Trigger:
    """When to compact: past `messages` messages and/or past `tokens` tokens (whichever comes first)."""

    messages: int | None = None
    tokens: int | None = None

    def __post_init__(self) -> None:
        for name in ("messages", "tokens"):
            check_count(getattr(self, name), f"Trigger.{name}", positive=True, optional=True)
        if self.messages is None and self.tokens is None:
            raise InvalidInputError("a Trigger needs messages=, tokens= or both")

    def exceeded(self, messages: Sequence[Message], counter: MessageTokenCounter) -> bool:
        """True when `messages` are past the trigger."""
        if self.messages is not None and len(messages) > self.messages:
            return True
        return self.tokens is not None and counter.total(messages) > self.tokens


class _SummarizerCalls:
    """Calls any `SummarizerLike` from sync or async code (the driver's target for the summarize step)."""

    def __init__(self, summarizer: SummarizerLike) -> None:
        if not callable(summarizer):
            raise InvalidInputError(f"summarizer must be callable, got {summarizer!r}")
        self.summarizer = summarizer
        self.takes_session = isinstance(summarizer, Summarizer) or _accepts(summarizer, "session_id")

    def _arguments(self, session_id: str) -> dict[str, Any]:
        return {"session_id": session_id} if self.takes_session else {}

    def summarize(self, messages: list[Message], session_id: str) -> str:
        """Summarize from sync code (an async summarizer runs on its own event loop if none is running)."""
        return _checked(call_sync(self.summarizer, messages, **self._arguments(session_id)))

    async def asummarize(self, messages: list[Message], session_id: str) -> str:
        """Summarize from async code (a sync summarizer runs in a thread)."""
        if isinstance(self.summarizer, Summarizer):
            return _checked(await self.summarizer.acall(messages, session_id=session_id))
        return _checked(await call_async(self.summarizer, messages, **self._arguments(session_id)))


def _accepts(function: Callable[..., Any], name: str) -> bool:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == name or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def _checked(text: Any) -> str:
    if not isinstance(text, str) or not text.strip():
        raise SummarizationError(f"the summarizer must return a non-empty str, got {text!r:.200}")
    return text.strip()


@dataclass(frozen=True)
class _Plan:
    pinned: Sequence[Message]
    middle: Sequence[Message]
    recent: Sequence[Message]

    @property
    def originals(self) -> list[Message]:
        return [m for m in self.middle if not is_summary(m)]


def _same_messages(a: Sequence[Message], b: Sequence[Message]) -> bool:
    return len(a) == len(b) and all(x is y or x == y for x, y in zip(a, b))


class SummarizingChatMemory(WrappingChatMemory):
    """A `ChatMemory` that summarizes the middle of a session once it passes `trigger` (see the module docstring).

    `trigger` is a message count or a `Trigger`; `keep_first` messages stay pinned at the start and the last
    `keep_recent` stay verbatim. `tokenizer` counts tokens for a token trigger. `summary_prefix` starts the
    summary message's text.
    """

    def __init__(
        self,
        inner: ChatMemory,
        *,
        summarizer: SummarizerLike,
        trigger: int | Trigger,
        keep_first: int = 0,
        keep_recent: int = 10,
        archive: bool = True,
        tokenizer: TokenizerLike | MessageTokenCounter = None,
        summary_prefix: str = SUMMARY_PREFIX,
        retries: int = 8,
    ) -> None:
        super().__init__(inner)
        self.trigger = trigger if isinstance(trigger, Trigger) else Trigger(messages=trigger)
        check_count(keep_first, "keep_first")
        check_count(keep_recent, "keep_recent")
        if not isinstance(summary_prefix, str):
            raise InvalidInputError(f"summary_prefix must be a str, got {type(summary_prefix).__name__}")
        if self.trigger.messages is not None and keep_first + keep_recent + 1 >= self.trigger.messages:
            raise InvalidInputError(
                f"keep_first + keep_recent + 1 (the summary) must be below the trigger of {self.trigger.messages} "
                "messages, or compaction could not bring a session under it"
            )
        self.keep_first = keep_first
        self.keep_recent = keep_recent
        self.archive = archive
        self.counter = token_counter(tokenizer)
        self.summary_prefix = summary_prefix
        self.retries = check_count(retries, "retries", positive=True)
        self._summarizer = _SummarizerCalls(summarizer)

    def __repr__(self) -> str:
        return f"SummarizingChatMemory({self.inner!r}, trigger={self.trigger}, keep_first={self.keep_first}, " + (
            f"keep_recent={self.keep_recent})"
        )

    def _derived_suffixes(self) -> tuple[str, ...]:
        return (SUMMARIZER_SUFFIX, ARCHIVE_SUFFIX) if self.archive else (SUMMARIZER_SUFFIX,)

    # Public API ----------------------------------------------------------------------------------------------

    def _compact(self, session_id: str, *, force: bool = False) -> Steps[bool]:
        """Compact the session now if it is past the trigger (or whenever there is a middle, with `force`).

        Returns True if it was compacted.
        """
        return (yield from self._compaction(check_id(session_id), force))

    compact, acompact = twins(_compact)

    def _archived(self, session_id: str) -> Steps[list[Message]]:
        """The original messages summarized away from the session so far, oldest first."""
        return (yield from archived_steps(self.inner, session_id))

    archived, aarchived = twins(_archived)

    def context_window(
        self,
        session_id: str,
        *,
        max_messages: int | None = None,
        max_tokens: int | None = None,
        tokenizer: TokenizerLike | MessageTokenCounter = None,
    ) -> ContextWindow:
        """A `ContextWindow` over the session that always keeps the pinned messages and the summary."""
        return ContextWindow(
            self,
            session_id,
            max_messages=max_messages,
            max_tokens=max_tokens,
            tokenizer=self.counter if tokenizer is None else tokenizer,
            keep_first=self.keep_first,
        )

    # Planning (no I/O) ---------------------------------------------------------------------------------------

    def _plan(self, messages: Sequence[Message], force: bool, start: int | None = None) -> _Plan | None:
        n = len(messages)
        if not force and not self.trigger.exceeded(messages, self.counter):
            return None
        pinned = group_end(messages, min(self.keep_first, n))
        if start is None:
            cut = max(n - self.keep_recent, pinned)
            start = group_start(messages, cut, pinned)  # keep a tool call with its results among the recent ...
            if not self._fits(messages, pinned, start):
                start = group_end(messages, cut)  # ... unless that would stay past the trigger
            if start == n:  # nothing left recent: a tool call still waiting for results stays for them
                start = pending_call_start(messages, pinned)
        middle = messages[pinned:start]
        if not any(not is_summary(m) for m in middle):
            return None
        return _Plan(messages[:pinned], middle, messages[start:])

    def _fits(self, messages: Sequence[Message], pinned: int, start: int) -> bool:
        kept = len(messages) - start + pinned + 1
        if self.trigger.messages is not None and kept > self.trigger.messages:
            return False
        if self.trigger.tokens is not None:
            recent = [*messages[:pinned], *messages[start:]]
            return self.counter.total(recent) < self.trigger.tokens
        return True

    def _summary_message(self, middle: Sequence[Message], text: str) -> Message:
        previous: Any = next((m.metadata[SUMMARY_KEY] for m in middle if is_summary(m)), {})
        previous = previous if isinstance(previous, dict) else {}
        originals = sum(not is_summary(m) for m in middle)
        info = {
            "summarized": int(previous.get("summarized", 0)) + originals,
            "layers": int(previous.get("layers", 0)) + 1,
        }
        return Message(
            role="system",
            content=self.summary_prefix + text,
            created_at=datetime.now(timezone.utc),
            metadata={SUMMARY_KEY: info},
        )

    # Steps (run by the sync or the async driver) -------------------------------------------------------------

    def _after_write(self, session_id: str) -> Steps[None]:
        try:
            yield from self._compaction(session_id, False)
        except Exception as error:
            raise SummarizationError(
                f"the write to session {session_id!r} was stored, but compacting it failed: {error}", stored=True
            ) from error

    def _compaction(self, session_id: str, force: bool) -> Steps[bool]:
        summarizer_session = check_id(session_id + SUMMARIZER_SUFFIX)
        done: tuple[Sequence[Message], str] | None = None  # (middle, summary) already produced by this call
        archived: list[Message] = []
        for _ in range(self.retries):
            messages, version = yield Call(self.inner, "load_versioned", (session_id,))
            plan = self._plan(messages, force, self._reusable_start(messages, done))
            if plan is None:
                return False
            if done is not None and _same_messages(done[0], plan.middle):
                text = done[1]
            else:
                try:
                    text = yield Call(self._summarizer, "summarize", (list(plan.middle), summarizer_session))
                except SummarizationError:
                    raise
                except Exception as error:
                    raise SummarizationError(f"the summarizer raised {type(error).__name__}: {error}") from error
                done = (plan.middle, text)
                _, now = yield Call(self.inner, "load_versioned", (session_id,))
                if now != version:  # written meanwhile (the summarizer may take seconds): plan again
                    continue
            if self.archive:
                todo = not_yet_archived(plan.originals, archived)
                if todo:
                    yield from archive_steps(self.inner, session_id, todo)
                archived = plan.originals
            new = [*plan.pinned, self._summary_message(plan.middle, text), *plan.recent]
            try:
                yield Call(self.inner, "save", (session_id, new), {"expected_version": version})
            except ConcurrentModificationError:
                continue
            return True
        raise ConcurrentModificationError(f"session {session_id!r} kept changing while compacting; try again")

    def _reusable_start(self, messages: Sequence[Message], done: tuple[Sequence[Message], str] | None) -> int | None:
        """If the middle summarized by an earlier attempt still follows the pinned messages, end the middle there."""
        if done is None:
            return None
        pinned = group_end(messages, min(self.keep_first, len(messages)))
        middle = done[0]
        end = pinned + len(middle)
        if end < len(messages) and _same_messages(messages[pinned:end], middle):
            return end
        return None
