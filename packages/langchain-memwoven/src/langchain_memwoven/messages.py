"""LangChain messages to and from memwoven `Message`s: the conversion the chat history uses, for code that moves
messages between the two (a LangGraph thread's messages into a memwoven `ChatMemory`, and back)."""

from langchain_memwoven._convert import from_core_many as from_memwoven_messages
from langchain_memwoven._convert import to_core_many as to_memwoven_messages

__all__ = ["from_memwoven_messages", "to_memwoven_messages"]
