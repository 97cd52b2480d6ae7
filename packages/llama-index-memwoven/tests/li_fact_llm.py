"""A scripted LLM for fact extraction, offline: what LlamaIndex's fact blocks ask, answered by rule.

Extraction (LlamaIndex's extraction prompt): every user message ``Remember: <fact>`` before the prompt gives that
fact, unless the prompt's existing facts hold it already. Condensing (its condense prompt): all the existing facts
joined into one, ``Condensed: a; b; c``. Each answer is the ``<facts><fact>...</fact></facts>`` XML the prompts ask
for. Also run as a script by the multi-process tests: ``python li_fact_llm.py URL KEY FACT...`` puts the facts
through a `Memory` whose `MemwovenFactMemoryBlock` is over the item memory at URL, then prints the block's content;
with ``$LI_FACT_BARRIER`` set to ``<directory>:<n>``, its first extraction waits until `n` processes have started
theirs (each after reading the stored facts), so that all of them write over the same version.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    CompletionResponse,
    CompletionResponseGen,
    LLMMetadata,
)
from llama_index.core.bridge.pydantic import Field
from llama_index.core.llms import CustomLLM
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from llama_index.core.memory import Memory

from llama_index.memory.memwoven import MemwovenFactMemoryBlock
from llama_index.storage.chat_store.memwoven import MemwovenDBChatStore
from memwoven import InMemoryChatMemory

REMEMBER = "Remember: "
EXISTING = re.compile(r"<existing_facts>(.*?)</existing_facts>", re.DOTALL)
FACT = re.compile(r"<fact>(.*?)</fact>", re.DOTALL)


class ScriptedFactLLM(CustomLLM):
    """Answers LlamaIndex's fact extraction and condense prompts by rule; records what it was asked."""

    calls: list[str] = Field(default_factory=list, description="'extract' or 'condense', per call, in order.")
    pause: Callable[[], Awaitable[None]] | None = Field(
        default=None, description="Awaited by `achat` before it answers (to line up concurrent extractions)."
    )

    @property
    def metadata(self) -> LLMMetadata:
        """A chat model."""
        return LLMMetadata(is_chat_model=True)

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        """The facts the prompt (the last message) asks for."""
        prompt = messages[-1].content or ""
        existing = [fact.strip() for fact in FACT.findall(next(iter(EXISTING.findall(prompt)), ""))]
        if "fact condensing system" in prompt:
            self.calls.append("condense")
            facts = ["Condensed: " + "; ".join(existing)]
        elif "fact extraction system" in prompt:
            self.calls.append("extract")
            said = [m.content or "" for m in messages[:-1] if m.role == "user"]
            found = [text.removeprefix(REMEMBER).strip() for text in said if text.startswith(REMEMBER)]
            facts = [fact for fact in found if fact not in existing]
        else:
            raise AssertionError(f"not a fact prompt: {prompt[:200]!r}")
        content = "<facts>\n" + "".join(f"  <fact>{fact}</fact>\n" for fact in facts) + "</facts>"
        return ChatResponse(message=ChatMessage(role="assistant", content=content))

    @llm_chat_callback()
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        """`chat`, after `pause`."""
        if self.pause is not None:
            await self.pause()
        response: ChatResponse = self.chat(messages, **kwargs)
        return response

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        """Not used: the fact blocks chat."""
        raise NotImplementedError("ScriptedFactLLM only chats")

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        """Not used: the fact blocks chat."""
        raise NotImplementedError("ScriptedFactLLM only chats")


def flushing_memory(block: MemwovenFactMemoryBlock, session_id: str = "session-1") -> Memory:
    """A `Memory` with `block`, so small that each new turn flushes the ones before it into the block (its chat
    history in memory: only the block's facts outlive it)."""
    return Memory.from_defaults(
        session_id=session_id,
        chat_store=MemwovenDBChatStore(InMemoryChatMemory()),
        token_limit=60,
        chat_history_token_ratio=0.5,
        token_flush_size=10,
        memory_blocks=[block],
    )


async def tell(memory: Memory, facts: Sequence[str]) -> None:
    """One turn per fact (``Remember: <fact>`` / ``Noted.``), then a turn long enough to flush them all."""
    for text in [*(REMEMBER + fact for fact in facts), "That is all I wanted to tell you for now. " * 8]:
        await memory.aput(ChatMessage(role="user", content=text))
        await memory.aput(ChatMessage(role="assistant", content="Noted."))


def file_barrier(spec: str) -> Callable[[], Awaitable[None]]:
    """A pause that, the first time, waits until `n` processes have reached it (``<directory>:<n>``)."""
    directory, count = spec.rsplit(":", 1)
    reached: list[bool] = []

    async def pause() -> None:
        if reached:
            return
        reached.append(True)
        await asyncio.to_thread(Path(directory, str(os.getpid())).touch)
        deadline = time.monotonic() + 120
        while len(os.listdir(directory)) < int(count):
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {len(os.listdir(directory))} of {count} processes reached the barrier")
            await asyncio.sleep(0.01)

    return pause


async def _main(url: str, key: str, facts: list[str]) -> None:
    barrier = os.environ.get("LI_FACT_BARRIER")
    llm = ScriptedFactLLM(pause=file_barrier(barrier) if barrier else None)
    block = MemwovenFactMemoryBlock.from_url(url, key=key, llm=llm)
    try:
        await tell(flushing_memory(block), facts)
        print(await block.aget())
    finally:
        await block.aclose()


if __name__ == "__main__":
    asyncio.run(_main(sys.argv[1], sys.argv[2], sys.argv[3:]))
