"""`ChatMemoryContract`: the conformance tests of invariants CM1-CM10, for any `ChatMemory`."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from memwoven.contracts import ChatMemory
from memwoven.errors import ConcurrentModificationError, CorruptMemoryError, InvalidInputError
from memwoven.models import Message
from memwoven.testing._driver import MODES, Driver, StorageHooks, driving
from memwoven.testing.samples import HOSTILE_IDS, OVER_THE_LIMITS, sample_conversation, turn, values_at_the_limits

__all__ = ["ChatMemoryContract"]


def _texts(messages: list[Message]) -> list[str]:
    return [m.text for m in messages]


def _with_id(message: Message, message_id: str) -> Message:
    return message.model_copy(update={"id": message_id})


class ChatMemoryContract(StorageHooks[ChatMemory]):
    """Subclass this in a test module and provide the `chat_memory` fixture (a fresh, empty memory).

    Optional hooks widen the suite: `reopen(memory)` returns a second object over the same storage (tests that
    writes through one are seen by the other), and `corrupt_session(memory, session_id)` damages a session's
    stored data (tests CM7). Every test runs twice: through the sync API and through the async twins.
    """

    writers: int = 4
    writes_per_writer: int = 25

    @pytest.fixture
    def chat_memory(self) -> ChatMemory:
        """A fresh, empty memory. Override in the subclass."""
        raise NotImplementedError("provide a `chat_memory` fixture returning a fresh, empty ChatMemory")

    def corrupt_session(self, memory: ChatMemory, session_id: str) -> None:
        """Damage the stored data of `session_id` so that it cannot be decoded."""
        pytest.skip(f"{type(self).__name__} provides no corrupt_session hook (storage cannot be damaged)")

    @pytest.fixture(params=MODES)
    def memory(self, request: pytest.FixtureRequest, chat_memory: ChatMemory) -> Iterator[Driver]:
        """The memory under test, driven through the sync API or the async twins."""
        with driving(chat_memory, request.param) as driver:
            yield driver

    # CM1 -----------------------------------------------------------------------------------------------------

    def test_cm1_load_returns_a_full_snapshot(self, memory: Driver) -> None:
        conversation = sample_conversation()
        memory.save("s", conversation)
        loaded = memory.load("s")
        assert loaded == conversation
        loaded.append(Message(role="user", content="not saved"))
        assert memory.load("s") == conversation
        with pytest.raises(TypeError):
            loaded[3].metadata["model"] = "changed"  # messages are immutable values

    # CM2 -----------------------------------------------------------------------------------------------------

    def test_cm2_save_replaces_the_whole_history(self, memory: Driver) -> None:
        memory.save("s", [turn(i) for i in range(5)])
        replacement = [Message(role="user", content="only"), Message(role="assistant", content="this")]
        memory.save("s", replacement)
        assert memory.load("s") == replacement

    @pytest.mark.parametrize(
        "edit",
        ["append_two", "change_middle", "truncate", "change_last", "replace_all", "prepend", "insert_middle"],
    )
    def test_cm2_every_kind_of_edit_is_stored_exactly(self, memory: Driver, edit: str) -> None:
        original = [turn(i) for i in range(12)]
        memory.save("s", original)
        new = list(memory.load("s"))
        if edit == "append_two":
            new += [turn(100), turn(101)]
        elif edit == "change_middle":
            new[5] = Message(role="assistant", content="changed")
        elif edit == "truncate":
            new = new[:4]
        elif edit == "change_last":
            new[-1] = Message(role="assistant", content="changed")
        elif edit == "replace_all":
            new = [turn(i, "other") for i in range(3)]
        elif edit == "prepend":
            new = [Message(role="system", content="first"), *new]
        else:
            new.insert(6, Message(role="tool", tool_call_id="t", content="inserted"))
        memory.save("s", new)
        assert memory.load("s") == new
        memory.save("s", original)  # and back again
        assert memory.load("s") == original

    def test_cm2_equal_copies_count_as_unchanged(self, memory: Driver) -> None:
        memory.save("s", [turn(i) for i in range(6)])
        copies = [m.model_copy(deep=True) for m in memory.load("s")]
        memory.save("s", [*copies, turn(6)])
        assert _texts(memory.load("s")) == [f"w-{i}" for i in range(7)]

    def test_cm2_an_object_claiming_equality_is_not_kept_as_a_message(self, memory: Driver) -> None:
        memory.save("s", [turn(0), turn(1)])
        memory.load("s")  # the stored messages remembered, as a reader's object does

        class ClaimsEquality:
            def __eq__(self, other: object) -> bool:
                return True

            __hash__ = None  # type: ignore[assignment]

        try:
            memory.save("s", [ClaimsEquality(), turn(1), turn(2)])
        except InvalidInputError:
            assert _texts(memory.load("s")) == ["w-0", "w-1"]  # refused: nothing written
            return
        loaded = memory.load("s")  # accepted as the message it claims to equal: that message is kept
        assert all(type(message) is Message for message in loaded)
        assert _texts(loaded) == ["w-0", "w-1", "w-2"]

    def test_cm2_values_equal_in_python_but_not_in_json_are_rewritten(self, memory: Driver) -> None:
        for value in [1, True, 1.0, "1", [1], {"v": 1}, None]:
            memory.save("s", [turn(0), Message(role="user", content="x", metadata={"v": value})])
            stored = memory.load("s")[1].metadata["v"]
            assert json.dumps(stored) == json.dumps(value), value

    # CM3 -----------------------------------------------------------------------------------------------------

    def test_cm3_order_and_content_are_kept_without_dedupe(self, memory: Driver) -> None:
        conversation = sample_conversation()
        memory.save("s", conversation)
        loaded = memory.load("s")
        assert loaded == conversation
        assert [m.model_dump(mode="json") for m in loaded] == [m.model_dump(mode="json") for m in conversation]
        assert _texts(loaded).count("Thanks!") == 2

    def test_cm3_plain_dicts_are_accepted(self, memory: Driver) -> None:
        memory.save("s", [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}])
        assert memory.load("s") == [Message(role="user", content="hi"), Message(role="assistant", content="hello")]

    # CM4 -----------------------------------------------------------------------------------------------------

    @pytest.mark.parametrize(
        "bad",
        [
            [{"role": "user", "content": "ok"}, {"role": "wizard", "content": "unknown role"}],
            [{"role": "user", "content": "ok"}, {"role": "user", "metadata": {"x": float("nan")}}],
            [{"role": "user", "content": "ok"}, {"role": "user", "metadata": {"x": {1, 2}}}],
            [{"role": "user", "content": "ok"}, "not a message"],
            [{"role": "user", "content": "ok"}, {"role": "user", "content": [{"type": "image"}]}],
            # bytes are no text: lax validation would decode them into some
            [{"role": "user", "content": "ok"}, {"role": "user", "content": b"bytes"}],
            [{"role": "user", "content": "ok"}, {"role": "user", "id": b"id"}],
            [{"role": "user", "content": "ok"}, {"role": "user", "metadata": {"a": {b"key": 1}}}],
            "a string is not a list of messages",
        ],
    )
    def test_cm4_a_rejected_save_writes_nothing(self, memory: Driver, bad: Any) -> None:
        before = [turn(i) for i in range(3)]
        version = memory.save("s", before)
        with pytest.raises(InvalidInputError):
            memory.save("s", bad)
        with pytest.raises(InvalidInputError):
            memory.append("s", bad)
        assert memory.load_versioned("s") == (before, version)

    @pytest.mark.parametrize(
        "bad", [{"content": "pasted \ud83d"}, {"metadata": {"k": ["\udfff"]}}], ids=["content", "metadata"]
    )
    def test_cm4_a_lone_surrogate_is_refused(self, memory: Driver, bad: dict[str, Any]) -> None:
        """A lone surrogate has no UTF-8 form: no store can hold it, so none accepts it (the in-process one too)."""
        version = memory.save("s", [turn(0)])
        message = Message(role="user", **bad)
        with pytest.raises(InvalidInputError):
            memory.append("s", [message])
        with pytest.raises(InvalidInputError):
            memory.save("s", [turn(0), message])
        assert memory.load_versioned("s") == ([turn(0)], version)

    def test_cm4_a_message_subclass_is_stored_as_a_message(self, memory: Driver) -> None:
        """A subclass's own fields have no place in storage: refused, while one without any is a plain message."""

        class Tagged(Message):
            tag: str = "kept nowhere"

        class Plain(Message):
            pass

        version = memory.save("s", [turn(0)])
        with pytest.raises(InvalidInputError):
            memory.append("s", [Tagged(role="user")])
        with pytest.raises(InvalidInputError):
            memory.save("s", [Tagged(role="user")])
        assert memory.load_versioned("s") == ([turn(0)], version)
        memory.append("s", [Plain(role="user", content="plain")])
        loaded = memory.load("s")
        assert [type(m) for m in loaded] == [Message, Message]
        assert loaded[1] == Message(role="user", content="plain")

    def test_cm4_every_accepted_value_reads_back_equal(self, memory: Driver) -> None:
        values = values_at_the_limits()
        message = Message(
            role="assistant",
            content=[{"type": "text", "text": values["text"]}, {"type": "opaque", "kind": "k", "data": values}],
            tool_calls=[{"id": "c", "name": "f", "arguments": values}],
            metadata=values,
            extras={"framework": values},
        )
        memory.save("s", [message])
        assert [m.model_dump_json() for m in memory.load("s")] == [message.model_dump_json()]
        second = self.reopen(memory.target)
        if second is not None:  # and from a fresh object, which decodes what was stored
            with driving(second, "async" if memory.is_async else "sync", memory.loop) as fresh:
                assert [m.model_dump_json() for m in fresh.load("s")] == [message.model_dump_json()]

    @pytest.mark.parametrize("over", OVER_THE_LIMITS, ids=["int-digits", "negative-int-digits", "depth"])
    def test_cm4_values_past_the_limits_are_refused(self, memory: Driver, over: dict[str, Any]) -> None:
        memory.save("s", [turn(0)])
        for bad in ({"metadata": over}, {"tool_calls": [{"id": "c", "name": "f", "arguments": over}]}):
            with pytest.raises(InvalidInputError):
                memory.append("s", [{"role": "assistant", **bad}])
        assert memory.load("s") == [turn(0)]

    def test_cm4_readers_see_the_old_or_the_new_history_never_a_mix(self, memory: Driver) -> None:
        old = [turn(i, "old") for i in range(20)]
        new = [turn(i, "new") for i in range(7)]
        memory.save("s", old)
        allowed = (_texts(old), _texts(new))
        seen: list[list[str]] = []
        rounds = 30
        if memory.is_async:

            async def write() -> None:
                for i in range(rounds):
                    await memory.target.asave("s", new if i % 2 == 0 else old)

            async def read() -> None:
                for _ in range(rounds):
                    seen.append(_texts(await memory.target.aload("s")))
                    await asyncio.sleep(0)

            async def both() -> None:
                await asyncio.gather(write(), read(), read())

            memory.run(both())
        else:
            writer = threading.Thread(
                target=lambda: [memory.save("s", new if i % 2 == 0 else old) for i in range(rounds)]
            )
            writer.start()
            while writer.is_alive() or len(seen) < rounds:
                seen.append(_texts(memory.load("s")))
            writer.join()
        assert all(texts in allowed for texts in seen)

    # CM5 -----------------------------------------------------------------------------------------------------

    def test_cm5_an_unknown_session_loads_as_empty(self, memory: Driver) -> None:
        assert memory.load("never-saved") == []
        assert memory.load_versioned("never-saved") == ([], 0)
        assert memory.sessions() == []

    # CM6 -----------------------------------------------------------------------------------------------------

    def test_cm6_clear_removes_one_session(self, memory: Driver) -> None:
        memory.save("a", [turn(1)])
        memory.save("b", [turn(2)])
        memory.clear("a")
        memory.clear("never-saved")  # no error
        assert memory.load("a") == []
        assert memory.load("b") == [turn(2)]
        assert memory.sessions() == ["b"]

    def test_cm6_saving_nothing_removes_the_session(self, memory: Driver) -> None:
        memory.save("a", [turn(1)])
        assert memory.save("a", []) == 0
        assert memory.sessions() == []
        assert memory.load_versioned("a") == ([], 0)

    # CM7 -----------------------------------------------------------------------------------------------------

    def test_cm7_corrupt_storage_raises_and_spares_other_sessions(self, memory: Driver) -> None:
        memory.save("damaged", [turn(1), turn(2)])
        memory.save("intact", [turn(3)])
        self.corrupt_session(memory.target, "damaged")
        second = self.reopen(memory.target)  # a fresh object has no in-process copy of the good data
        if second is None:
            self._expect_corruption(memory)
            return
        with driving(second, "async" if memory.is_async else "sync", memory.loop) as reader:
            self._expect_corruption(reader)
        with contextlib.suppress(CorruptMemoryError):  # the object that saw the good data may serve it from cache
            assert memory.load("damaged") == [turn(1), turn(2)]

    @staticmethod
    def _expect_corruption(reader: Driver) -> None:
        with pytest.raises(CorruptMemoryError) as raised:
            reader.load("damaged")
        assert "damaged" in str(raised.value)
        assert reader.load("intact") == [turn(3)]

    # CM8 -----------------------------------------------------------------------------------------------------

    def test_cm8_sessions_are_isolated_whatever_their_ids(self, memory: Driver) -> None:
        for position, session_id in enumerate(HOSTILE_IDS):
            memory.save(session_id, [turn(position, session_id[:20])])
        assert memory.sessions() == sorted(HOSTILE_IDS)
        for position, session_id in enumerate(HOSTILE_IDS):
            assert memory.load(session_id) == [turn(position, session_id[:20])], session_id
        memory.clear("a%")
        memory.append("a_", [turn(99)])
        assert memory.load("a%b") == [turn(HOSTILE_IDS.index("a%b"), "a%b")]
        assert memory.load("a_b") == [turn(HOSTILE_IDS.index("a_b"), "a_b")]
        assert len(memory.load("a_")) == 2
        assert sorted(set(HOSTILE_IDS) - {"a%"}) == memory.sessions()

    @pytest.mark.parametrize("bad_id", ["", "nul\x00byte", "lone \ud800 surrogate", 42, None, b"bytes"])
    def test_cm8_unusable_ids_are_rejected(self, memory: Driver, bad_id: Any) -> None:
        with pytest.raises(InvalidInputError):
            memory.save(bad_id, [turn(1)])
        with pytest.raises(InvalidInputError):
            memory.load(bad_id)
        with pytest.raises(InvalidInputError):
            memory.append(bad_id, [turn(1)])
        assert memory.sessions() == []

    def test_cm8_a_session_view_is_bound_to_its_id(self, memory: Driver) -> None:
        view = memory.target.session("viewed")
        bound = Driver(view, memory.loop)
        bound.save([turn(1)])
        bound.append([turn(2)])
        assert bound.load() == [turn(1), turn(2)]
        assert memory.load("viewed") == [turn(1), turn(2)]
        assert memory.load("other") == []
        bound.clear()
        assert memory.sessions() == []

    def test_cm8_a_prefix_is_a_boundary(self, memory: Driver) -> None:
        with self.neighbour(memory.target) as neighbour:
            if neighbour is None:
                pytest.skip(f"{type(memory.target).__name__} has no prefix or namespace option")
            memory.save("s", [turn(0)])
            memory.save("x", [turn(1)])
            assert neighbour.sessions() == []
            assert neighbour.load("s") == []
            neighbour.clear("s")
            neighbour.save("x", [turn(9)])  # the same session id, under the other prefix
            assert memory.load("s") == [turn(0)]
            assert memory.load("x") == [turn(1)]
            assert memory.sessions() == ["s", "x"]
            assert neighbour.sessions() == ["x"]

    # CM9 -----------------------------------------------------------------------------------------------------

    def test_cm9_concurrent_appends_lose_nothing(self, memory: Driver) -> None:
        writers = [f"writer{w}" for w in range(self.writers)]
        if memory.is_async:

            async def write(name: str) -> None:
                for i in range(self.writes_per_writer):
                    await memory.target.aappend("s", [turn(i, name)])

            async def all_writers() -> None:
                await asyncio.gather(*(write(name) for name in writers))

            memory.run(all_writers())
        else:
            threads = [
                threading.Thread(
                    target=lambda n=name: [memory.append("s", [turn(i, n)]) for i in range(self.writes_per_writer)]
                )
                for name in writers
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        loaded = memory.load("s")
        assert len(loaded) == len(writers) * self.writes_per_writer
        for name in writers:
            assert [m.metadata["index"] for m in loaded if m.metadata["writer"] == name] == list(
                range(self.writes_per_writer)
            )

    def test_cm9_stale_versions_are_refused(self, memory: Driver) -> None:
        assert memory.load_versioned("s").version == 0
        first = memory.save("s", [turn(1)], expected_version=0)
        assert first > 0
        with pytest.raises(ConcurrentModificationError):
            memory.save("s", [turn(2)], expected_version=0)
        second = memory.append("s", [turn(2)])
        assert second > first
        with pytest.raises(ConcurrentModificationError):
            memory.save("s", [turn(3)], expected_version=first)
        assert memory.load_versioned("s") == ([turn(1), turn(2)], second)
        third = memory.save("s", [turn(3)], expected_version=second)
        assert third > second
        memory.clear("s")
        with pytest.raises(ConcurrentModificationError):  # a version from before the clear is never reused
            memory.save("s", [turn(4)], expected_version=third)

    @pytest.mark.usefixtures("stopped_clock")
    def test_cm9_versions_are_not_reused_on_a_clock_that_stands_still(self, memory: Driver) -> None:
        """Versions are time-based: a clock that does not move between a clear and a new save (Windows' moves
        every ~16 ms, a test's is frozen, NTP steps one back) must not give the cleared session's version again."""
        before = memory.save("s", [turn(1)])
        memory.clear("s")
        assert memory.save("s", [turn(2)]) != before
        with pytest.raises(ConcurrentModificationError):
            memory.save("s", [turn(3)], expected_version=before)
        assert memory.load("s") == [turn(2)]

    def test_cm9_update_retries_read_modify_write(self, memory: Driver) -> None:
        memory.save("s", [turn(0)])
        version = memory.update("s", lambda messages: [*messages, turn(len(messages))])
        assert memory.load_versioned("s") == ([turn(0), turn(1)], version)

    def test_cm9_append_returns_growing_versions(self, memory: Driver) -> None:
        versions = [memory.append("s", [turn(i)]) for i in range(3)]
        assert versions == sorted(set(versions))
        assert memory.append("s", []) == versions[-1]
        assert memory.load("s") == [turn(0), turn(1), turn(2)]

    # CM10 ----------------------------------------------------------------------------------------------------

    def test_cm10_an_append_retried_with_the_same_ids_is_stored_once(self, memory: Driver) -> None:
        first = [_with_id(turn(0), "m0"), _with_id(turn(1), "m1")]
        version = memory.append("s", first)
        assert memory.append("s", first) == version  # nothing new: nothing written, the version unchanged
        assert memory.load_versioned("s") == (first, version)
        later = memory.append("s", [first[1], _with_id(turn(2), "m2"), turn(3), turn(3)])
        assert later > version
        assert memory.load("s") == [*first, _with_id(turn(2), "m2"), turn(3), turn(3)]  # no id: no dedupe (CM3)

    def test_cm10_a_stored_id_wins_over_a_different_message_with_that_id(self, memory: Driver) -> None:
        memory.append("s", [_with_id(turn(0), "m0")])
        memory.append("s", [_with_id(Message(role="user", content="other text"), "m0")])
        assert memory.load("s") == [_with_id(turn(0), "m0")]

    def test_cm10_ids_are_per_session(self, memory: Driver) -> None:
        memory.append("a", [_with_id(turn(0), "m0")])
        memory.append("b", [_with_id(turn(0), "m0")])
        assert memory.load("a") == memory.load("b") == [_with_id(turn(0), "m0")]

    @pytest.mark.parametrize("write", ["save", "append", "update"])
    def test_cm10_two_messages_with_one_id_are_refused(self, memory: Driver, write: str) -> None:
        memory.save("s", [_with_id(turn(0), "m0")])
        twins = [_with_id(turn(1), "x"), _with_id(turn(2), "x")]

        def write_twins() -> None:
            if write == "update":
                memory.update("s", lambda messages: [*messages, *twins])
            else:
                getattr(memory, write)("s", twins)

        with pytest.raises(InvalidInputError, match="'x'"):
            write_twins()
        assert memory.load("s") == [_with_id(turn(0), "m0")]
        with pytest.raises(InvalidInputError, match="'m0'"):
            memory.save("s", [_with_id(turn(0), "m0"), turn(1), _with_id(turn(2), "m0")])
        assert memory.load("s") == [_with_id(turn(0), "m0")]

    def test_cm10_a_save_may_move_or_drop_an_id(self, memory: Driver) -> None:
        memory.save("s", [_with_id(turn(i), f"m{i}") for i in range(4)])
        reordered = [_with_id(turn(3), "m3"), _with_id(turn(0), "m0")]
        memory.save("s", reordered)
        assert memory.load("s") == reordered
        memory.append("s", [_with_id(turn(1), "m1")])  # dropped by the save: a new message again
        assert memory.load("s") == [*reordered, _with_id(turn(1), "m1")]
        memory.clear("s")
        memory.append("s", [_with_id(turn(3), "m3")])
        assert memory.load("s") == [_with_id(turn(3), "m3")]

    def test_cm10_concurrent_appends_of_one_message_store_it_once(self, memory: Driver) -> None:
        batches = [[_with_id(turn(i), f"m{i}") for i in range(start, start + 5)] for start in (0, 3, 6, 0, 3)]
        if memory.is_async:

            async def all_writers() -> None:
                await asyncio.gather(*(memory.target.aappend("s", batch) for batch in batches))

            memory.run(all_writers())
        else:
            threads = [threading.Thread(target=memory.append, args=("s", batch)) for batch in batches]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        stored = [m.id for m in memory.load("s")]
        assert sorted(stored, key=lambda i: int(i[1:])) == [f"m{i}" for i in range(11)]

    # A second object over the same storage ------------------------------------------------------------------

    def test_writes_are_seen_through_another_object(self, memory: Driver, other: Driver) -> None:
        memory.save("s", [turn(i) for i in range(5)])
        assert other.load("s") == [turn(i) for i in range(5)]
        other.save("s", [turn(0), Message(role="assistant", content="edited by other")])
        assert memory.load("s") == [turn(0), Message(role="assistant", content="edited by other")]
        memory.save("s", [*memory.load("s"), turn(9)])
        other.append("s", [turn(10)])
        assert _texts(memory.load("s")) == ["w-0", "edited by other", "w-9", "w-10"]
        version = memory.load_versioned("s").version
        assert other.load_versioned("s").version == version
        other.clear("s")
        assert memory.load("s") == []
        assert memory.sessions() == []
