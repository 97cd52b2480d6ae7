"""One conversation, two frameworks: LangChain writes a session, LlamaIndex reads and continues it. Runs offline.

    uv run python examples/cross_framework_session.py [path/to/chat.db]

A LangChain app stores a conversation (a system prompt, a picture, a tool call and its result) through
`MemwovenChatMessageHistory`. A LlamaIndex app opens the same session through `MemwovenChatStore` and gets
native `ChatMessage`s: roles, text, the image as an `ImageBlock`, the tool call as a `ToolCallBlock`. It adds a
turn, and LangChain reads the whole conversation back, its own messages exactly as it wrote them. Both adapters
store memwoven `Message`s with standard fields (role, content parts, tool calls), which is what makes the
session readable by either.
"""

from __future__ import annotations

import base64
import sys
import tempfile
from pathlib import Path

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from llama_index.core.base.llms.types import ChatMessage, ImageBlock, MessageRole, TextBlock, ToolCallBlock

from langchain_memwoven import MemwovenChatMessageHistory
from llama_index.storage.chat_store.memwoven import MemwovenChatStore
from memwoven import SQLChatMemory

PICTURE = base64.b64encode(b"\x89PNG\r\n\x1a\n (a picture of a cat)").decode()
SESSION = "user-7/pictures"


def langchain_turns() -> list[BaseMessage]:
    """What the LangChain app says and hears: a picture, a tool call, its result and an answer."""
    return [
        SystemMessage("You describe pictures and check the weather."),
        HumanMessage(
            [
                {"type": "text", "text": "What is in this picture? And the weather in Cortina?"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PICTURE}"}},
            ]
        ),
        AIMessage("", tool_calls=[{"name": "weather", "args": {"city": "Cortina"}, "id": "call_1"}]),
        ToolMessage("Sunny, 21 °C", tool_call_id="call_1", name="weather"),
        AIMessage("A cat on a sofa. In Cortina it is sunny and 21 °C."),
    ]


def describe(message: ChatMessage) -> str:
    """A one-line view of a LlamaIndex message's blocks."""
    parts = []
    for block in message.blocks:
        if isinstance(block, TextBlock) and block.text:
            parts.append(repr(block.text))
        elif isinstance(block, ImageBlock):
            parts.append(f"<image {block.image_mimetype}>")
        elif isinstance(block, ToolCallBlock):
            parts.append(f"<tool call {block.tool_name}({block.tool_kwargs})>")
    return " ".join(parts) or "''"


def main(path: Path) -> None:
    """Write through LangChain, read and append through LlamaIndex, read back through LangChain."""
    memory = SQLChatMemory(f"sqlite:///{path}")  # one memory object serves both frameworks
    try:
        history = MemwovenChatMessageHistory(memory, SESSION)
        history.clear()  # start afresh on every run
        turns = langchain_turns()
        history.add_messages(turns)  # gives each message without an id one, as LangGraph does
        print(f"LangChain wrote {len(history.messages)} messages to {SESSION!r}")

        chat_store = MemwovenChatStore(memory)
        print("LlamaIndex reads them:")
        for chat_message in chat_store.get_messages(SESSION):
            print(f"  {chat_message.role.value:>9}: {describe(chat_message)}")
        chat_store.add_message(
            SESSION, ChatMessage(role=MessageRole.USER, content="Thanks! Is it warm enough to swim?")
        )

        print("LangChain reads the continued conversation:")
        messages = history.messages
        for message in messages:
            calls = [f"{call['name']}({call['args']})" for call in getattr(message, "tool_calls", [])]
            print(f"  {type(message).__name__:>13}: {message.text!r}" + (f" tool calls {calls}" if calls else ""))
        if messages[:-1] != turns:
            raise SystemExit("LangChain's own messages did not come back exactly")
        print(f"LangChain's {len(messages) - 1} messages came back unchanged, plus LlamaIndex's turn")
    finally:
        memory.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()) / "cross-framework.db")
