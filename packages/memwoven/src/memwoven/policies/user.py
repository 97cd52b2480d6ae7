"""`UserMemory`: facts about a user that outlive any one conversation, persisted on any `ItemMemory`.

A user's facts are the items of ``("memwoven", "user", *namespace, user_id, "facts")`` (`namespace` is empty by
default: labels of your own, a tenant say), one item per fact, keyed by a digest of the fact's normalized form::

    Item(namespace=("memwoven", "user", "alice", "facts"), key=fact_key("Lives in Lyon"),
         value={"fact": "Lives in Lyon", "order": <creation stamp, ns>})

So adding is case- and whitespace-insensitive by construction: a known fact (compared casefolded, spaces
collapsed) has a key that exists, and a new one is written with ``expected_version=0``, so two writers adding the
same fact at once store it once. Past `max_facts`, the oldest facts (by their creation stamp) are moved to the
sibling namespace ``(..., user_id, "archive")`` unless ``archive=False``; `delete` and `clear` remove facts
outright, as asked. An optional `extractor` (any callable, sync or async, from messages to an iterable of fact
strings) lets `learn(messages)` add what it finds.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from memwoven._steps import Call, Steps, twins
from memwoven.contracts import ItemMemory, ItemWrite, check_id, check_namespace, compare_and_set
from memwoven.errors import ConcurrentModificationError, CorruptMemoryError, InvalidInputError
from memwoven.models import Item, Message
from memwoven.policies._base import ItemRecords, UserCallable, check_count, check_items, next_order

__all__ = ["USER_ROOT", "UserMemory", "fact_key", "normalize_fact"]

USER_ROOT = ("memwoven", "user")
"""The first labels of every user-memory namespace."""

Extractor = Callable[[list[Message]], Any]


def normalize_fact(fact: str) -> str:
    """The form facts are compared in: casefolded, whitespace collapsed."""
    return " ".join(fact.split()).casefold()


def fact_key(fact: str) -> str:
    """The item key of a fact: the SHA-256 of its normalized form (`normalize_fact`), in hex."""
    if not isinstance(fact, str):
        raise InvalidInputError(f"a fact must be a str, got {type(fact).__name__}")
    return hashlib.sha256(normalize_fact(fact).encode("utf-8", "surrogatepass")).hexdigest()


def _clean(facts: Iterable[str]) -> dict[str, str]:
    """The non-blank facts, whitespace collapsed, by key (the first of equal ones kept)."""
    if isinstance(facts, str):
        raise InvalidInputError("expected an iterable of facts, got a single str (use add())")
    cleaned: dict[str, str] = {}
    for fact in facts:
        key = fact_key(fact)
        text = " ".join(fact.split())
        if text:
            cleaned.setdefault(key, text)
    return cleaned


class UserMemory(ItemRecords):
    """Facts about one user across sessions: add (deduplicated), list, delete, and render for a prompt.

    Every method has an async twin (``aadd``, ``afacts``, ...), which calls the item memory's async twins.
    """

    def __init__(
        self,
        store: ItemMemory,
        user_id: str,
        *,
        max_facts: int = 100,
        extractor: Extractor | None = None,
        archive: bool = True,
        namespace: Sequence[str] = (),
    ) -> None:
        check_count(max_facts, "max_facts", positive=True)
        if extractor is not None and not callable(extractor):
            raise InvalidInputError("extractor must be callable")
        self.store = check_items(store, "UserMemory")
        self.user_id = check_id(user_id, "user id")
        labels = check_namespace(namespace, "namespace", prefix=True)
        self.namespace = check_namespace((*USER_ROOT, *labels, self.user_id, "facts"), "user memory namespace")
        self.archive_namespace = (*self.namespace[:-1], "archive")
        self.max_facts = max_facts
        self.extractor = extractor
        self.archive = archive

    def __repr__(self) -> str:
        return f"UserMemory({self.store!r}, {self.user_id!r}, max_facts={self.max_facts})"

    # Reading and the cap ---------------------------------------------------------------------------------------

    def _fact(self, item: Item) -> str:
        fact = item.value.get("fact")
        if not isinstance(fact, str):
            raise CorruptMemoryError(f"user memory {item.namespace!r} holds an item that is not a fact")
        return fact

    def _texts(self, namespace: tuple[str, ...]) -> Steps[list[str]]:
        """The facts of `namespace`, oldest first."""
        return [self._fact(item) for item in (yield from self._stored(namespace))]

    def _extractor(self) -> Extractor:
        if self.extractor is None:
            raise InvalidInputError("this UserMemory has no extractor; pass extractor= to learn from messages")
        return self.extractor

    def _evict(self) -> Steps[None]:
        """Past `max_facts`, archive the oldest facts (unless `archive` is off), then delete them.

        Archiving first, a crash in between leaves a fact in both places, never in neither. Each delete is a
        compare-and-set on the version listed, so a fact re-added meanwhile is left alone.
        """
        counted: int = yield Call(self.store, "count", (self.namespace,))
        if counted <= self.max_facts:
            return
        stored = yield from self._stored(self.namespace)
        excess = stored[: max(0, len(stored) - self.max_facts)]
        if not excess:
            return
        if self.archive:
            moved = [
                ItemWrite(self.archive_namespace, i.key, {"fact": self._fact(i), "order": next_order()}) for i in excess
            ]
            yield Call(self.store, "put_many", (moved,))
        for item in excess:
            try:
                yield Call(self.store, "delete", (item.namespace, item.key), {"expected_version": item.version})
            except ConcurrentModificationError:
                continue

    # Sync API and its async twins (``aadd``, ``afacts``, ...) ----------------------------------------------------

    def _add(self, fact: str) -> Steps[bool]:
        """Add a fact unless an equal one (ignoring case and spacing) is known; return whether it was added."""
        added: list[str] = yield Call(self, "add_many", ([fact],))
        return bool(added)

    add, aadd = twins(_add)

    def _add_many(self, facts: Iterable[str]) -> Steps[list[str]]:
        """Add several facts at once (one read, one write); return those that were new, in the order given."""
        candidates = _clean(facts)
        if not candidates:
            return []

        def attempt() -> Steps[list[str]]:
            found: list[Item | None] = yield Call(self.store, "get_many", ([(self.namespace, k) for k in candidates],))
            new = [(key, text) for (key, text), item in zip(candidates.items(), found) if item is None]
            if new:
                writes = [ItemWrite(self.namespace, k, {"fact": t, "order": next_order()}, None, 0) for k, t in new]
                yield Call(self.store, "put_many", (writes,))
            return [text for _, text in new]

        added = yield from compare_and_set(attempt, f"the facts of user {self.user_id!r}")
        if added:
            yield from self._evict()
        return added

    add_many, aadd_many = twins(_add_many)

    def _facts(self) -> Steps[list[str]]:
        """The known facts, oldest first."""
        return (yield from self._texts(self.namespace))

    facts, afacts = twins(_facts)

    def _has(self, fact: str) -> Steps[bool]:
        """True if the fact (ignoring case and spacing) is known."""
        item: Item | None = yield Call(self.store, "get", (self.namespace, fact_key(fact)))
        return item is not None

    has, ahas = twins(_has)

    def _delete(self, fact: str) -> Steps[bool]:
        """Delete a fact (matched ignoring case and spacing); return whether it was known."""
        existed: bool = yield Call(self.store, "delete", (self.namespace, fact_key(fact)))
        return existed

    delete, adelete = twins(_delete)

    def _clear(self) -> Steps[None]:
        """Delete every fact of this user (the archive is kept)."""
        yield from self._delete_all(self.namespace)

    clear, aclear = twins(_clear)

    def _archived(self) -> Steps[list[str]]:
        """The facts moved out by the `max_facts` cap, in the order they were moved."""
        return (yield from self._texts(self.archive_namespace))

    archived, aarchived = twins(_archived)

    def _learn(self, messages: Sequence[Message]) -> Steps[list[str]]:
        """Run the extractor over `messages` and add the facts it returns; return those that were new.

        From async code (`alearn`) a sync extractor runs in a thread.
        """
        facts = yield Call(UserCallable(self._extractor()), "call", (list(messages),))
        added: list[str] = yield Call(self, "add_many", (facts,))
        return added

    learn, alearn = twins(_learn)

    def _to_context_string(
        self, *, title: str = "Known facts about the user:", max_facts: int | None = None
    ) -> Steps[str]:
        """The facts as lines for a prompt (the newest `max_facts` if given; "" when there are none)."""
        check_count(max_facts, "max_facts", optional=True)
        facts = yield from self._texts(self.namespace)
        if max_facts is not None:
            facts = facts[max(len(facts) - max_facts, 0) :]  # not facts[-max_facts:]: -0 is the whole list
        return "\n".join([title, *(f"- {fact}" for fact in facts)]) if facts else ""

    to_context_string, ato_context_string = twins(_to_context_string)
