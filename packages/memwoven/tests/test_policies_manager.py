"""MemoryManager on every backend: conversation + working memory + user facts (in an item memory beside the
chat backend), forks, steps, prompts."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from policy_backends import BACKENDS, ITEMS_BESIDE, backend_fixture, conversation, items_fixture

from memwoven import ChatMemory, InMemoryChatMemory, InvalidInputError, ItemMemory, Message
from memwoven.policies import MemoryManager, SummarizingChatMemory, step_id


@pytest.fixture(params=BACKENDS)
def chat_memory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ChatMemory]:
    yield from backend_fixture(request, tmp_path)


@pytest.fixture
def items(request: pytest.FixtureRequest, chat_memory: ChatMemory, tmp_path: Path) -> Iterator[ItemMemory]:
    """The item memory beside the chat backend (SQLite beside files, the same server beside PostgreSQL)."""
    yield from items_fixture(ITEMS_BESIDE[request.node.callspec.params["chat_memory"]], tmp_path)


def test_conversation_working_memory_and_prompt(chat_memory: ChatMemory, items: ItemMemory) -> None:
    manager = MemoryManager(chat_memory, "chat", items=items, user_id="alice", max_messages=3)
    manager.add([Message(role="system", content="Be brief."), *conversation(3, tools_every=0)])
    assert len(manager.history()) == 7
    assert [m.text for m in manager.window()] == ["Be brief.", "question 2", "answer 2"]
    assert manager.prompt() == manager.window().messages  # no context yet: the window itself
    manager.working.set("goal", "plan a trip", importance=0.9)
    assert manager.user is not None
    manager.user.add("Afraid of flying")
    prompt = manager.prompt()
    assert prompt[0].role == "system"
    assert prompt[0].metadata == {"memwoven_context": True}
    assert prompt[0].text == ("Working memory:\n- goal: plan a trip\n\nKnown facts about the user:\n- Afraid of flying")
    assert prompt[1:] == manager.window().messages
    assert len(manager.history()) == 7  # the context message is built, not stored


def test_fork_shares_the_conversation_and_not_the_working_memory(chat_memory: ChatMemory, items: ItemMemory) -> None:
    manager = MemoryManager(chat_memory, "chat", items=items, user_id="u")
    manager.working.set("owner", "root")
    child = manager.fork("researcher")
    child.add([Message(role="user", content="from the child")])
    child.working.set("owner", "researcher")
    assert [m.text for m in manager.history()] == ["from the child"]
    assert (manager.working.get("owner"), child.working.get("owner")) == ("root", "researcher")
    assert child.user is manager.user
    assert child.scope_id == "researcher"
    with pytest.raises(InvalidInputError):
        manager.fork(manager.scope_id)


def test_steps_have_their_own_conversation_and_share_working_memory(chat_memory: ChatMemory, items: ItemMemory) -> None:
    manager = MemoryManager(chat_memory, "chat", items=items)
    manager.working.set("plan", ["search", "book"])
    first, second = manager.step(1), manager.step(2)
    assert (first.session_id, manager.step_id(2)) == ("chat:step-1", "chat:step-2")
    first.add([Message(role="user", content="step one")])
    second.add([Message(role="user", content="step two")])
    assert first.working.get("plan") == ["search", "book"]
    assert manager.history() == []
    assert manager.steps() == [1, 2]
    assert first.steps() == []
    assert step_id("x", 0) == "x:step-0"
    with pytest.raises(InvalidInputError):
        step_id("x", -1)
    manager.clear()
    assert manager.working.to_dict() == {}
    assert manager.steps() == [1, 2]
    chat_memory.append("chat:step-²", [Message(role="user", content="a superscript is no step number")])
    chat_memory.append("chat:step-٣", [Message(role="user", content="nor an Arabic-Indic digit")])
    chat_memory.append("chat:step-007", [Message(role="user", content="nor a padded number: step(7) is not it")])
    assert manager.steps() == [1, 2]


def test_async_twins_over_a_summarizing_memory(chat_memory: ChatMemory, items: ItemMemory) -> None:
    memory = SummarizingChatMemory(chat_memory, summarizer=lambda ms: "the gist", trigger=6, keep_recent=2)

    async def scenario() -> None:
        manager = MemoryManager(memory, "chat", items=items, user_id="u", max_tokens=500)
        for number in range(4):
            await manager.aadd(conversation(1, tools_every=0, start=number))
        history = await manager.ahistory()
        assert history[0].text.endswith("the gist")
        assert len(history) <= 6
        await manager.working.aset("k", "v")
        assert manager.user is not None
        await manager.user.aadd("Likes owls")
        prompt = await manager.aprompt()
        assert prompt[0].text.startswith("Working memory:")
        assert prompt[1:] == (await manager.awindow()).messages
        await manager.step(3).aadd([Message(role="user", content="s")])
        assert await manager.asteps() == [3]
        await manager.aclear()
        assert await manager.ahistory() == []
        assert await manager.working.ato_dict() == {}

    asyncio.run(scenario())


def test_windows_keep_what_the_summarizing_memory_pins(chat_memory: ChatMemory, items: ItemMemory) -> None:
    memory = SummarizingChatMemory(
        chat_memory, summarizer=lambda ms: "the gist", trigger=8, keep_first=1, keep_recent=2
    )
    manager = MemoryManager(memory, "chat", items=items, max_messages=3)
    assert manager.keep_first == 1
    assert MemoryManager(chat_memory, "x", items=items).keep_first == 0
    manager.add([Message(role="user", content="I am Ada")])
    for number in range(6):
        manager.add(conversation(1, tools_every=0, start=number))
    assert manager.window().messages[0].text == "I am Ada"
    assert manager.window().messages[1].text.endswith("the gist")
    for i in range(10):  # the scratchpad is not a conversation: never summarized
        manager.working.set(f"k{i}", i)
    assert len(manager.working.keys()) == 10
    assert [m.text for m in manager.history()].count("I am Ada") == 1  # nor stored in it


def test_working_memory_and_facts_live_in_the_item_memory(chat_memory: ChatMemory, items: ItemMemory) -> None:
    manager = MemoryManager(chat_memory, "chat", items=items, user_id="alice")
    manager.working.set("goal", "rest")
    assert manager.user is not None
    manager.user.add("Likes owls")
    assert chat_memory.sessions() == []  # the conversation store holds conversations only
    assert items.namespaces() == [("memwoven", "user", "alice", "facts"), ("memwoven", "working", "chat")]
    assert manager.fork("helper").working.store is items
    with pytest.raises(TypeError, match="ItemMemory"):
        MemoryManager(chat_memory, "chat", items=InMemoryChatMemory())  # type: ignore[arg-type]


def test_bad_settings_are_refused_when_the_object_is_built_before_anything_is_written() -> None:
    """They were accepted, then raised on the first load or prompt (after a write was stored), or in the case of
    `retries=0` made every write raise `SummarizationError(stored=True)`; `max_facts=0` listed every fact and
    `max_facts=-1` / `max_items=-1` silently dropped entries."""
    from memwoven import InMemoryItemMemory
    from memwoven.policies import ContextWindow, UserMemory, WorkingMemory

    chat, items = InMemoryChatMemory(), InMemoryItemMemory()
    refused = [
        (lambda: SummarizingChatMemory(chat, summarizer=lambda m: "S", trigger=50, retries=0), "retries"),
        (lambda: SummarizingChatMemory(chat, summarizer=lambda m: "S", trigger=50, summary_prefix=b"x"), "summary_"),
        (lambda: ContextWindow(chat, "s", keep_first=-1), "keep_first"),
        (lambda: MemoryManager(chat, "s", items=items, max_messages=0), "max_messages"),
        (lambda: MemoryManager(chat, "s", items=items, max_tokens=-5), "max_tokens"),
        (lambda: MemoryManager(chat, "s", items=items, keep_first=True), "keep_first"),
        (lambda: UserMemory(items, "u").to_context_string(max_facts=-1), "max_facts"),
        (lambda: WorkingMemory(items, "w").to_context_string(max_items=-1), "max_items"),
    ]
    for build, name in refused:
        with pytest.raises(InvalidInputError, match=name):
            build()
    assert chat.sessions() == []
    assert items.namespaces() == []
    user = UserMemory(items, "u")
    user.add_many(["Lives in Lyon", "Likes tea"])
    assert user.to_context_string(max_facts=0) == ""
    assert user.to_context_string(max_facts=5).count("\n- ") == 2
    assert asyncio.run(user.ato_context_string(max_facts=1)).endswith("\n- Likes tea")
