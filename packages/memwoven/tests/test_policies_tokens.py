"""Token counting: the offline estimator, tiktoken (offline, from a cached encoding), the per-message cache."""

from __future__ import annotations

import gc
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memwoven import ImagePart, InvalidInputError, Message, TextPart, ToolCall
from memwoven.policies import (
    EstimatingTokenizer,
    MessageTokenCounter,
    TiktokenTokenizer,
    TokenizerUnavailableError,
    token_counter,
    window,
)
from memwoven.testing import sample_conversation

SAMPLES = [
    "The quick brown fox jumps over the lazy dog.",
    "def window(messages, *, max_tokens=None):\n    return messages[-max_tokens:]\n",
    '{"query": "weather in Paris", "units": "metric", "days": 3, "flags": [true, false]}',
    "Ça va très bien, merci beaucoup ! Où est la gare ?",
    "日本語のテキストはトークン数が多いです。東京は日本の首都です。",
    "Answer in two sentences, then list the sources you used as bullet points with their URLs.",
]


def _tiktoken_cache() -> Path | None:
    """A directory holding tiktoken's cl100k_base and o200k_base files, shipped by llama-index-core (offline)."""
    spec = importlib.util.find_spec("llama_index.core")
    if spec is None or spec.origin is None:
        return None
    cache = Path(spec.origin).parent / "_static" / "tiktoken_cache"
    return cache if (cache / "9b5ad71b2ce5302211f9c61530b329a4922fc6a4").exists() else None


@pytest.fixture
def offline_tiktoken(monkeypatch: pytest.MonkeyPatch) -> None:
    cache = _tiktoken_cache()
    if cache is None:
        pytest.skip("no offline copy of tiktoken's encodings (llama-index-core ships one)")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cache))


def test_the_estimator_is_offline_and_close_to_bpe_counts() -> None:
    estimator = EstimatingTokenizer()
    assert estimator.count("") == 0
    assert estimator("hello world") == 2
    assert estimator.count("日本語") == 3
    assert estimator.count("12345678") == 3
    assert estimator.count("camelCaseWords") == 3
    assert estimator.count("!!!") == 2
    assert estimator.count("word " * 100) == 100
    with pytest.raises(InvalidInputError):
        EstimatingTokenizer(0)


def test_the_estimator_tracks_tiktoken(offline_tiktoken: None) -> None:
    exact = TiktokenTokenizer("cl100k_base")
    estimate = EstimatingTokenizer()
    for text in SAMPLES:
        ratio = estimate.count(text) / exact.count(text)
        assert 0.8 <= ratio <= 1.5, (text, ratio)


def test_tiktoken_by_model_encoding_name_or_object(offline_tiktoken: None) -> None:
    import tiktoken

    assert TiktokenTokenizer("gpt-4o").name == "o200k_base"
    assert TiktokenTokenizer("gpt-4").count("hello world") == 2
    encoding = tiktoken.get_encoding("cl100k_base")
    assert TiktokenTokenizer(encoding).count("<|endoftext|>") > 1  # special tokens count as plain text
    counter = token_counter("gpt-4o")
    assert counter is token_counter("gpt-4o")  # shared, so its cache lives on
    assert counter.count(Message(role="user", content="hello world")) == 3 + 2
    assert window([Message(role="user", content="hi")], max_tokens=100, tokenizer=encoding).tokens == 4


def test_tiktoken_failures_are_clear(monkeypatch: pytest.MonkeyPatch) -> None:
    import tiktoken

    def offline(name: str) -> Any:
        raise ConnectionError("no route to openaipublic.blob.core.windows.net")

    monkeypatch.setattr(tiktoken, "get_encoding", offline)
    with pytest.raises(TokenizerUnavailableError, match="TIKTOKEN_CACHE_DIR"):
        TiktokenTokenizer("gpt-4o")
    with pytest.raises(InvalidInputError, match="no model or encoding"):
        TiktokenTokenizer("not-a-model")
    with pytest.raises(InvalidInputError):
        TiktokenTokenizer("")


def test_pluggable_tokenizers() -> None:
    class Counter:
        def count(self, text: str) -> int:
            return len(text)

    message = Message(role="user", content="abcd")
    assert MessageTokenCounter(Counter()).count(message) == 3 + 4
    assert MessageTokenCounter(lambda text: 1, per_message=0).count(message) == 1
    assert token_counter(None) is token_counter(None)
    with pytest.raises(InvalidInputError):
        MessageTokenCounter(42)  # type: ignore[arg-type]


def test_everything_in_a_message_is_counted() -> None:
    counter = MessageTokenCounter(lambda text: len(text), per_message=0, per_name=0, per_tool_call=0)
    parts = Message(
        role="user",
        content=[TextPart(text="ab"), ImagePart(data="AAAA", mime_type="image/png", detail="low"), ImagePart(url="u")],
    )
    assert counter.count(parts) == 2 + 85 + 765
    call = Message(role="assistant", tool_calls=[ToolCall(id="x", name="f", arguments={"a": 1})])
    assert counter.count(call) == 1 + len('{"a":1}')
    assert counter.total(sample_conversation()) > 0


def test_counts_are_cached_per_message_and_released_with_it() -> None:
    seen: list[str] = []
    counter = MessageTokenCounter(lambda text: seen.append(text) or 1)
    message = Message(role="user", content="once")
    assert counter.count(message) == counter.count(message) == 4
    assert seen == ["once"]
    twin = Message(role="user", content="once")  # equal but another object: counted on its own
    counter.count(twin)
    assert len(seen) == 2
    assert len(counter._cache) == 2
    del message, twin
    gc.collect()
    assert len(counter._cache) == 0  # the cache never keeps a message alive


def test_the_cache_is_bounded() -> None:
    counter = MessageTokenCounter(cache_size=10)
    messages = [Message(role="user", content=str(i)) for i in range(50)]
    counter.total(messages)
    assert len(counter._cache) == 10


_words = st.lists(st.sampled_from(["alpha", "beta", "gamma"]), max_size=6).map(" ".join)
_parts = st.lists(
    st.one_of(
        _words.map(lambda text: TextPart(text=text)),
        st.sampled_from(["low", "high", "auto"]).map(lambda detail: ImagePart(url="https://x/i.png", detail=detail)),
    ),
    max_size=5,
)
_calls = st.lists(
    st.builds(
        lambda name, value: ToolCall(id="c", name=name, arguments={"q": value}),
        st.sampled_from(["search", "get weather"]),
        _words,
    ),
    max_size=3,
)


@settings(max_examples=200, deadline=None)
@given(name=st.none() | st.just("ada"), parts=_parts, calls=_calls, result=_words)
def test_property_every_part_of_a_message_is_counted(
    name: str | None, parts: list[TextPart | ImagePart], calls: list[ToolCall], result: str
) -> None:
    """Text, each image (its per-image estimate), each tool call's name and arguments, and tool results all count."""
    words = MessageTokenCounter(lambda text: len(text.split()), image_tokens=700, low_detail_image_tokens=70)
    user = Message(role="user", name=name, content=parts)
    expected = 3 + (1 + 1 if name else 0)
    for part in parts:
        if isinstance(part, TextPart):
            expected += len(part.text.split())
        else:
            expected += 70 if part.detail == "low" else 700
    assert words.count(user) == expected
    if parts:  # dropping any part never costs more
        assert words.count(Message(role="user", name=name, content=parts[1:])) <= expected
    caller = Message(role="assistant", tool_calls=calls)
    arguments = [json.dumps(c.arguments, separators=(",", ":")) for c in calls]  # as compact JSON
    assert words.count(caller) == 3 + sum(3 + len(c.name.split()) + len(a.split()) for c, a in zip(calls, arguments))
    assert words.count(Message(role="tool", tool_call_id="c", content=result)) == 3 + len(result.split())
