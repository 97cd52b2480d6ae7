"""`MemoryManager`: one agent's memory in one object, the conversation, working memory and user facts composed.

```python
memory = SummarizingChatMemory(SQLChatMemory("sqlite:///agent.db"), summarizer=..., trigger=60)
items = SQLItemMemory("sqlite:///agent.db")  # working memory and user facts
manager = MemoryManager(memory, "chat-42", items=items, user_id="alice", max_tokens=4000)
manager.add([Message(role="user", content="Book me a table for two.")])
manager.working.set("task", "book a restaurant", importance=0.9)
prompt = manager.prompt()  # context (working memory + user facts) + the windowed conversation
helper = manager.fork("planner")  # same conversation, its own working memory
step = manager.step(1)  # its own conversation "chat-42:step-1", the same working memory
```

A fork shares the conversation and has its own working-memory scope (``<scope>`` given); a step has its own
conversation, ``<session_id>:step-<n>``, and shares the working memory: the usual shapes for sub-agents working
in parallel and for the steps of a plan. Everything is stored in the memories passed in: the conversation in
`memory` (any backend, wrapped in any policy), working memory and user facts in `items` (any `ItemMemory`).
"""

from __future__ import annotations

from collections.abc import Sequence

from memwoven._steps import Call, Runner, Steps, twins
from memwoven.contracts import ChatMemory, ChatSession, ItemMemory, MessagesIn, check_id
from memwoven.errors import InvalidInputError
from memwoven.models import Message
from memwoven.policies._base import WrappingChatMemory, check_count, load_steps
from memwoven.policies.summarize import SummarizingChatMemory
from memwoven.policies.tokens import MessageTokenCounter, TokenizerLike, token_counter
from memwoven.policies.user import UserMemory
from memwoven.policies.window import Window, window_under
from memwoven.policies.working import WorkingMemory

__all__ = ["MemoryManager", "step_id"]

STEP_SEPARATOR = ":step-"


def step_id(session_id: str, step: int) -> str:
    """The session id of step `step` of a session: ``<session_id>:step-<step>``."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise InvalidInputError(f"a step number is a non-negative int, got {step!r}")
    return check_id(f"{session_id}{STEP_SEPARATOR}{step}")


def _pinned_by(memory: ChatMemory) -> int:
    """The `keep_first` of the first `SummarizingChatMemory` in a stack of policy wrappers (0 if none)."""
    while isinstance(memory, WrappingChatMemory):
        if isinstance(memory, SummarizingChatMemory):
            return memory.keep_first
        memory = memory.inner
    return 0


def _steps_of(session_id: str, sessions: Sequence[str]) -> list[int]:
    prefix = session_id + STEP_SEPARATOR
    numbers = (s[len(prefix) :] for s in sessions if s.startswith(prefix))
    # only the form step_id writes: "²" is a digit, and "007" would list a step whose step(7) is another session
    found = {int(n) for n in numbers if n.isascii() and n.isdecimal() and str(int(n)) == n}
    return sorted(found)


class MemoryManager(Runner):
    """A conversation (a session of `memory`), a `WorkingMemory` scope and optionally a user's `UserMemory`, both
    stored in `items`.

    The window budget (`max_messages`, `max_tokens`, `tokenizer`, `keep_first`) applies to `window()` and
    `prompt()`; `keep_first` defaults to that of a `SummarizingChatMemory` in `memory`, so the pinned messages and
    the summary stay in every window. Every method has an async twin.
    """

    def __init__(
        self,
        memory: ChatMemory,
        session_id: str,
        *,
        items: ItemMemory,
        scope_id: str | None = None,
        user_id: str | None = None,
        max_messages: int | None = None,
        max_tokens: int | None = None,
        tokenizer: TokenizerLike | MessageTokenCounter = None,
        keep_first: int | None = None,
    ) -> None:
        self.memory = memory
        self.session_id = check_id(session_id)
        self.scope_id = check_id(scope_id if scope_id is not None else session_id, "scope id")
        self.working = WorkingMemory(items, self.scope_id)
        self.user = UserMemory(items, user_id) if user_id is not None else None
        self.max_messages = check_count(max_messages, "max_messages", positive=True, optional=True)
        self.max_tokens = check_count(max_tokens, "max_tokens", positive=True, optional=True)
        self.keep_first = _pinned_by(memory) if keep_first is None else check_count(keep_first, "keep_first")
        self.counter = token_counter(tokenizer)

    def __repr__(self) -> str:
        return f"MemoryManager({self.memory!r}, {self.session_id!r}, scope_id={self.scope_id!r})"

    @property
    def conversation(self) -> ChatSession:
        """The conversation's session view."""
        return self.memory.session(self.session_id)

    def _child(self, session_id: str, scope_id: str) -> MemoryManager:
        child = MemoryManager(
            self.memory,
            session_id,
            items=self.working.store,
            scope_id=scope_id,
            max_messages=self.max_messages,
            max_tokens=self.max_tokens,
            tokenizer=self.counter,
            keep_first=self.keep_first,
        )
        child.user = self.user
        return child

    def fork(self, scope_id: str) -> MemoryManager:
        """A child that shares this conversation (and user) and has its own working memory, `scope_id`."""
        check_id(scope_id, "scope id")
        if scope_id == self.scope_id:
            raise InvalidInputError(f"a fork needs a scope of its own, not this manager's {scope_id!r}")
        return self._child(self.session_id, scope_id)

    def step(self, step: int) -> MemoryManager:
        """A child whose conversation is ``<session_id>:step-<step>``, sharing this working memory and user."""
        return self._child(step_id(self.session_id, step), self.scope_id)

    def step_id(self, step: int) -> str:
        """The session id of a step of this conversation."""
        return step_id(self.session_id, step)

    # Sync API and its async twins (``aadd``, ``ahistory``, ...) ---------------------------------------------------

    def _add(self, messages: MessagesIn) -> Steps[int]:
        """Append messages to the conversation; return its new version."""
        version: int = yield Call(self.memory, "append", (self.session_id, messages))
        return version

    add, aadd = twins(_add)

    def _history(self) -> Steps[list[Message]]:
        """The whole stored conversation."""
        return (yield from load_steps(self.memory, self.session_id))

    history, ahistory = twins(_history)

    def _window(self) -> Steps[Window]:
        """The conversation's window under this manager's budget."""
        return window_under(self, (yield from load_steps(self.memory, self.session_id)))

    window, awindow = twins(_window)

    def _prompt(self) -> Steps[list[Message]]:
        """Messages for a model: a system message with the working memory and user facts (if any), then the window.

        The context message is not stored; it is built on each call.
        """
        user = (yield Call(self.user, "to_context_string")) if self.user is not None else ""
        selected: Window = yield Call(self, "window")
        working = yield Call(self.working, "to_context_string")
        context = "\n\n".join(part for part in (working, user) if part)
        if not context:
            return list(selected.messages)
        return [Message(role="system", content=context, metadata={"memwoven_context": True}), *selected.messages]

    prompt, aprompt = twins(_prompt)

    def _steps(self) -> Steps[list[int]]:
        """The numbers of this conversation's steps that hold messages, sorted."""
        sessions: list[str] = yield Call(self.memory, "sessions")
        return _steps_of(self.session_id, sessions)

    steps, asteps = twins(_steps)

    def _clear(self) -> Steps[None]:
        """Clear the conversation and this scope's working memory (user facts and steps are kept)."""
        yield Call(self.memory, "clear", (self.session_id,))
        yield Call(self.working, "clear")

    clear, aclear = twins(_clear)
