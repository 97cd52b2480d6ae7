"""`MemwovenChatMessageHistory`: a LangChain chat message history over any memwoven `ChatMemory`."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage
from typing_extensions import Self

from langchain_memwoven._convert import from_core_many, to_core_many
from memwoven import ChatMemory
from memwoven._steps import Call, Runner, Steps, twins
from memwoven.urls import open_chat_memory

__all__ = ["MemwovenChatMessageHistory"]


class MemwovenChatMessageHistory(BaseChatMessageHistory, Runner):
    """The history of one session of a memwoven `ChatMemory`, as a LangChain `BaseChatMessageHistory`.

    `add_messages` is one atomic `append` (concurrent writers lose nothing); reads and writes have native async
    twins that use the backend's async methods. Messages round-trip exactly (see `langchain_memwoven._convert`)
    and are stored with standard fields other frameworks read. A message without an `id` (or with an empty one) is
    given one (a UUID, set on the message itself, as LangGraph's `add_messages` does), so adding the same messages
    again after an error whose outcome was unknown stores them once (CM10). So does adding the same message object
    again on purpose: to add a message twice (a constant ``HumanMessage("continue")``, say), add a new object.

    ```python
    memory = SQLChatMemory("sqlite:///chat.db")  # or any ChatMemory, shared by every session
    chain = RunnableWithMessageHistory(model, lambda session_id: MemwovenChatMessageHistory(memory, session_id))
    ```
    """

    def __init__(self, memory: ChatMemory, session_id: str, *, owns_memory: bool = False) -> None:
        """Bind `session_id` of `memory`; with `owns_memory`, `close()` also closes the memory."""
        super().__init__()
        self.memory = memory
        self.session_id = session_id
        self._session = memory.session(session_id)  # validates the id
        self._owns_memory = owns_memory

    @classmethod
    def from_url(cls, url: str, session_id: str, **options: Any) -> Self:
        """Open the chat memory at `url` (`memory://`, `file:`, `sqlite:`, `postgresql:`, ...) for one session.

        The history owns that memory: `close()` it (or use `with`) when done. To serve many sessions, open one
        `ChatMemory` and share it instead, since each URL opens its own connection pool.
        """
        return cls(open_chat_memory(url, **options), session_id, owns_memory=True)

    def __repr__(self) -> str:
        return f"MemwovenChatMessageHistory({self.memory!r}, {self.session_id!r})"

    def _get_messages_steps(self) -> Steps[list[BaseMessage]]:
        """The session's messages, in order (one `load`)."""
        return from_core_many((yield Call(self._session, "load")))

    # LangChain's name for the async read of `messages` is `aget_messages`
    _get_messages, aget_messages = twins(_get_messages_steps, async_name="aget_messages")
    aget_messages.__doc__ = "The session's messages, in order (one `aload`)."

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The session's messages, in order (one `load`)."""
        return self._get_messages()

    def _add_messages(self, messages: Sequence[BaseMessage]) -> Steps[None]:
        """Add messages at the end of the session in one atomic `append`; those already stored (by id) are skipped."""
        yield Call(self._session, "append", (to_core_many(_with_ids(messages)),))

    def _clear(self) -> Steps[None]:
        """Remove the session and all its messages."""
        yield Call(self._session, "clear")

    def _close(self) -> Steps[None]:
        """Close the memory if this history owns it (`from_url`); a shared memory is left open."""
        if self._owns_memory:
            yield Call(self.memory, "close")

    add_messages, aadd_messages = twins(_add_messages)
    clear, aclear = twins(_clear)
    close, aclose = twins(_close)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _with_ids(messages: Iterable[BaseMessage]) -> list[BaseMessage]:
    """`messages` as a list (an iterator is read once), each given a UUID as its `id` if it has none (on the
    caller's object, so a retry carries it)."""
    messages = list(messages)
    for message in messages:
        if isinstance(message, BaseMessage) and not message.id:  # "" is no id either: all would share it
            message.id = str(uuid.uuid4())
    return messages
