"""`MemwovenFactMemoryBlock`: LlamaIndex's `FactExtractionMemoryBlock` with its facts kept in a memwoven
`ItemMemory` instead of the block object.

LlamaIndex's own block holds its facts in a list on the object: they are gone when the process ends, and two
`Memory` objects (two sessions, two processes) of one user each learn their own. Here the facts of a key (a user
id, say) are one item, ``{"facts": [...]}`` at ``(namespace, key)``: read on every `aget`, written after every
extraction under the item's version (compare-and-set), so any block object over the same storage sees them and
concurrent extractions lose none of each other's facts. Extraction and condensing are LlamaIndex's own (its
prompts, its parsing, its `max_facts` rule).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.memory.memory_blocks.fact import FactExtractionMemoryBlock

from memwoven._steps import Call, Invoke, Steps, arun
from memwoven.contracts import ItemMemory, check_item_key, compare_and_set
from memwoven.errors import CorruptMemoryError, InvalidInputError
from memwoven.models import Item
from memwoven.urls import open_item_memory

__all__ = ["DEFAULT_NAMESPACE", "FACTS_FIELD", "MemwovenFactMemoryBlock"]

DEFAULT_NAMESPACE: tuple[str, ...] = ("llama_index", "facts")
"""The item namespace the facts are kept in unless told otherwise."""

FACTS_FIELD = "facts"
"""The field of the stored item's value that holds the list of facts (strings, oldest first)."""


class MemwovenFactMemoryBlock(FactExtractionMemoryBlock):
    """A `FactExtractionMemoryBlock` whose facts live in a memwoven `ItemMemory` (in memory, files, SQLite,
    PostgreSQL, MariaDB/MySQL, Redis), under ``(namespace, key)``.

    Every block with the same item memory, namespace and key shares one list of facts, whichever `Memory` (session)
    or process it belongs to. `aget` reads the stored facts (`facts` mirrors them as last read or written); when
    `Memory` flushes messages into the block, LlamaIndex's extraction (and, past `max_facts`, condensing) runs on
    the stored facts and the result is written with ``expected_version``. If another writer changed the facts in
    the meantime, this extraction's outcome (the facts it added, those condensing replaced) is merged into theirs,
    condensed again if the merge exceeds `max_facts`, and written again: no writer's facts are lost. A stored value
    that is not a list of facts raises `CorruptMemoryError`.
    """

    key: str = Field(description="The item key of the facts, e.g. a user id: blocks with the same key share them.")
    namespace: tuple[str, ...] = Field(
        default=DEFAULT_NAMESPACE, description="The item namespace the facts are kept in."
    )

    _items: ItemMemory = PrivateAttr()

    def __init__(
        self, items: ItemMemory, *, key: str, namespace: Sequence[str] = DEFAULT_NAMESPACE, **kwargs: Any
    ) -> None:
        if not isinstance(items, ItemMemory):
            raise InvalidInputError(f"MemwovenFactMemoryBlock needs a memwoven ItemMemory, got {type(items).__name__}")
        checked_namespace, checked_key = check_item_key(namespace, key)
        if kwargs.get("facts"):
            raise InvalidInputError(
                "MemwovenFactMemoryBlock reads its facts from the item memory; store them there, not in facts="
            )
        super().__init__(key=checked_key, namespace=checked_namespace, **kwargs)
        self._items = items

    @classmethod
    def from_url(
        cls, url: str | None = None, *, key: str, namespace: Sequence[str] = DEFAULT_NAMESPACE, **options: Any
    ) -> MemwovenFactMemoryBlock:
        """A block over the item memory a memwoven URL names (default `$MEMWOVEN_ITEM_URL`), e.g.
        ``sqlite:///facts.db``. Options naming a field of the block (`llm=`, `max_facts=`, `name=`, `priority=`,
        the prompt templates, ...) configure it; the others (`table_prefix=`, ...) go to `open_item_memory`.
        `close()` / `aclose()` close the item memory."""
        fields = {name: value for name, value in options.items() if name in cls.model_fields}
        rest = {name: value for name, value in options.items() if name not in fields}
        return cls(open_item_memory(url, **rest), key=key, namespace=namespace, **fields)

    @property
    def items(self) -> ItemMemory:
        """The memwoven item memory underneath."""
        return self._items

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> str:
        """The stored facts, as LlamaIndex's block formats them (``<fact>...</fact>`` lines; "" if none)."""
        self.facts, _ = await self._aread()
        return await super()._aget(messages, **block_kwargs)

    async def _aput(self, messages: list[ChatMessage]) -> None:
        """Extract facts from `messages` into the stored facts (compare-and-set, merged again on a conflict)."""
        if not messages:
            return
        stored, version = await self._aread()
        scratch = self.model_copy(update={"facts": list(stored)})  # concurrent calls must not share a list
        await super(MemwovenFactMemoryBlock, scratch)._aput(messages)  # LlamaIndex's extraction and condensing
        extracted = list(scratch.facts)
        added = [fact for fact in extracted if fact not in stored]
        replaced = {fact for fact in stored if fact not in extracted}
        first: tuple[list[str], int, list[str]] | None = (stored, version, extracted)

        def attempt() -> Steps[list[str]]:
            """Write the facts under the version read; after a conflict, this extraction merged into the facts
            stored now (condensed again past `max_facts`)."""
            nonlocal first
            if first is not None:
                (stored, version, facts), first = first, None
            else:
                stored, version = _facts_of((yield Call(self._items, "get", (self.namespace, self.key))))
                kept = [fact for fact in stored if fact not in replaced]
                facts = kept + [fact for fact in added if fact not in stored]
                if len(facts) > self.max_facts:
                    facts = yield Invoke(self._condensed, (messages, facts))
            if facts != stored:
                value = {FACTS_FIELD: facts}
                yield Call(self._items, "put", (self.namespace, self.key, value), {"expected_version": version})
            return facts

        what = f"the facts at {self.key!r:.200} in {self.namespace!r:.200}"
        self.facts = await arun(compare_and_set(attempt, what))

    async def _condensed(self, messages: list[ChatMessage], facts: list[str]) -> list[str]:
        """`facts` condensed with the block's condense prompt, as LlamaIndex's block does past `max_facts` (kept as
        they are if the LLM answers with none)."""
        prompt = self.fact_condense_prompt_template.format_messages(
            existing_facts="\n".join(f"<fact>{fact}</fact>" for fact in facts), max_facts=self.max_facts
        )
        response = await self.llm.achat(messages=[*messages, *prompt])
        return self._parse_facts_xml(response.message.content or "") or facts

    async def _aread(self) -> tuple[list[str], int]:
        """The stored facts and the item's version (0: no facts stored yet)."""
        return _facts_of(await self._items.aget(self.namespace, self.key))

    def close(self) -> None:
        """Release the item memory's connections (the async ones are better released by `aclose`)."""
        self._items.close()

    async def aclose(self) -> None:
        """Release the item memory's connections."""
        await self._items.aclose()


def _facts_of(item: Item | None) -> tuple[list[str], int]:
    """The facts an item holds and its version (none and 0 for no item)."""
    return ([], 0) if item is None else (_stored_facts(item), item.version)


def _stored_facts(item: Item) -> list[str]:
    """The facts an item holds; `CorruptMemoryError` unless its value is ``{"facts": [non-empty strings]}``."""
    found = item.value.get(FACTS_FIELD)
    facts = [fact for fact in found if isinstance(fact, str) and fact] if isinstance(found, list) else []
    if not isinstance(found, list) or len(facts) != len(found):
        raise CorruptMemoryError(
            f"item {item.key!r:.200} in {item.namespace!r:.200} does not hold facts "
            f'(a JSON object {{"{FACTS_FIELD}": [non-empty strings]}})'
        )
    return facts
