"""`UserMemory`: facts about a user that outlive any one conversation, persisted on any `ChatMemory`.

A user's facts are one session, ``memwoven:user:<user_id>`` by default (the user id in the `namespace`, see
`memwoven.namespaces`: no two users or namespaces share a session), one message per fact, oldest first::

    Message(role="system", content="<the fact>", created_at=<when added>, metadata={"memwoven_fact": True})

Adding is case- and whitespace-insensitive: a fact already known (compared casefolded, spaces collapsed) is not
added again. Past `max_facts`, the oldest facts are dropped, and appended to ``<session>:archive`` first unless
``archive=False``; `delete` and `clear` remove facts outright, as asked. An optional `extractor` (any callable,
sync or async, from messages to an iterable of fact strings) lets `learn(messages)` add what it finds. Given a
policy wrapper (`SummarizingChatMemory`, `TrimmingChatMemory`), facts are stored in the backend under it: a
conversation policy never summarizes or trims them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timezone
from typing import Any

from memwoven._steps import Call, Steps, twins
from memwoven.contracts import ChatMemory, check_id
from memwoven.errors import InvalidInputError
from memwoven.models import Message
from memwoven.namespaces import check_namespace, namespaced_id
from memwoven.policies._base import SessionRecords, UserCallable, archive_id, load_steps, rewrite_steps, unwrap

__all__ = ["FACT_KEY", "UserMemory", "normalize_fact"]

FACT_KEY = "memwoven_fact"
"""The `Message.metadata` key that marks a fact."""

Extractor = Callable[[list[Message]], Any]


def normalize_fact(fact: str) -> str:
    """The form facts are compared in: casefolded, whitespace collapsed."""
    return " ".join(fact.split()).casefold()


def _clean(facts: Iterable[str]) -> list[str]:
    if isinstance(facts, str):
        raise InvalidInputError("expected an iterable of facts, got a single str (use add())")
    cleaned = []
    for fact in facts:
        if not isinstance(fact, str):
            raise InvalidInputError(f"a fact must be a str, got {type(fact).__name__}")
        text = " ".join(fact.split())
        if text:
            cleaned.append(text)
    return cleaned


class UserMemory(SessionRecords):
    """Facts about one user across sessions: add (deduplicated), list, delete, and render for a prompt.

    Every method has an async twin (``aadd``, ``afacts``, ...).
    """

    def __init__(
        self,
        store: ChatMemory,
        user_id: str,
        *,
        max_facts: int = 100,
        extractor: Extractor | None = None,
        archive: bool = True,
        namespace: str = "memwoven:user:",
    ) -> None:
        if isinstance(max_facts, bool) or not isinstance(max_facts, int) or max_facts < 1:
            raise InvalidInputError(f"max_facts must be a positive int, got {max_facts!r}")
        if extractor is not None and not callable(extractor):
            raise InvalidInputError("extractor must be callable")
        self.store = unwrap(store)
        self.user_id = check_id(user_id, "user id")
        self.session_id = check_id(namespaced_id(check_namespace(namespace), user_id), "user memory session id")
        self.max_facts = max_facts
        self.extractor = extractor
        self.archive = archive

    def __repr__(self) -> str:
        return f"UserMemory({self.store!r}, {self.user_id!r}, max_facts={self.max_facts})"

    # Pure helpers ----------------------------------------------------------------------------------------------

    def _delete_change(self, record: str) -> Callable[[list[Message]], list[Message]]:
        key = normalize_fact(record)
        return lambda messages: [m for m in messages if normalize_fact(m.text) != key]

    def _extractor(self) -> Extractor:
        if self.extractor is None:
            raise InvalidInputError("this UserMemory has no extractor; pass extractor= to learn from messages")
        return self.extractor

    # Sync API and its async twins (``aadd``, ``afacts``, ...) ----------------------------------------------------

    def _add(self, fact: str) -> Steps[bool]:
        """Add a fact unless an equal one (ignoring case and spacing) is known; return whether it was added."""
        added: list[str] = yield Call(self, "add_many", ([fact],))
        return bool(added)

    add, aadd = twins(_add)

    def _add_many(self, facts: Iterable[str]) -> Steps[list[str]]:
        """Add several facts at once (one write); return those that were new."""
        candidates = _clean(facts)
        added: list[str] = []

        def plan(messages: list[Message]) -> tuple[list[Message], list[Message]] | None:
            known = {normalize_fact(m.text) for m in messages}
            added.clear()
            now = datetime.now(timezone.utc)
            new = list(messages)
            for fact in candidates:
                key = normalize_fact(fact)
                if key not in known:
                    known.add(key)
                    added.append(fact)
                    new.append(Message(role="system", content=fact, created_at=now, metadata={FACT_KEY: True}))
            if not added:
                return None
            excess = max(0, len(new) - self.max_facts)
            return new[excess:], new[:excess]

        if candidates:
            yield from rewrite_steps(self.store, self.session_id, plan, archive=self.archive)
        return list(added)

    add_many, aadd_many = twins(_add_many)

    def _facts(self) -> Steps[list[str]]:
        """The known facts, oldest first."""
        return [m.text for m in (yield from self._messages())]

    facts, afacts = twins(_facts)

    def _has(self, fact: str) -> Steps[bool]:
        """True if the fact (ignoring case and spacing) is known."""
        messages = yield from self._messages()
        key = normalize_fact(fact)
        return any(normalize_fact(m.text) == key for m in messages)

    has, ahas = twins(_has)

    def _delete(self, fact: str) -> Steps[bool]:
        """Delete a fact (matched ignoring case and spacing); return whether it was known."""
        return (yield from self._delete_record(fact))

    delete, adelete = twins(_delete)

    def _clear(self) -> Steps[None]:
        """Delete every fact of this user (the archive is kept)."""
        yield from self._clear_session()

    clear, aclear = twins(_clear)

    def _archived(self) -> Steps[list[str]]:
        """The facts dropped by the `max_facts` cap, oldest first."""
        return [m.text for m in (yield from load_steps(self.store, archive_id(self.session_id)))]

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
        facts = [m.text for m in (yield from self._messages())]
        if max_facts is not None:
            facts = facts[-max_facts:]
        return "\n".join([title, *(f"- {fact}" for fact in facts)]) if facts else ""

    to_context_string, ato_context_string = twins(_to_context_string)
