"""Sample data for tests: messages that exercise every field, and ids chosen to break naive storage."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from memwoven.models import MAX_INT_DIGITS, MAX_JSON_DEPTH, ImagePart, Message, OpaquePart, TextPart, ToolCall

__all__ = ["HOSTILE_IDS", "OVER_THE_LIMITS", "sample_conversation", "turn", "values_at_the_limits"]

HOSTILE_IDS: tuple[str, ...] = (
    "plain",
    "Plain",  # case twin
    "PLAIN",
    "a%",
    "a_",
    "a%b",
    "a_b",
    "o'brien",
    'say "hi"',
    "x; DROP TABLE sessions; --",
    "../../etc/passwd",
    "/absolute/path",
    "a/b",
    "a\\b",
    ".",
    "..",
    "*",
    "?",
    "[abc]",
    "{tag}",
    "user:1",
    "user:1:archive",
    "caf\u00e9",  # NFC
    "cafe\u0301",  # NFD twin of the above
    "\u65e5\u672c\u8a9e",
    "emoji \U0001f9e0",
    " leading and trailing ",
    "tab\tnewline\n",
    "x" * 10_000,
)


def turn(index: int, writer: str = "w") -> Message:
    """A small distinct user message, handy for concurrency tests."""
    return Message(role="user", content=f"{writer}-{index}", metadata={"writer": writer, "index": index})


def sample_conversation() -> list[Message]:
    """A conversation that uses every field of the model (tool calls, images, opaque parts, extras, ...)."""
    moment = datetime(2026, 11, 21, 12, 30, 15, 123456, tzinfo=timezone.utc)
    return [
        Message(role="system", content="You are a careful assistant."),
        Message(role="developer", content="Answer in English.", metadata={"policy": {"level": 2, "tags": ["a"]}}),
        Message(
            role="user",
            id="u1",
            name="alice",
            created_at=moment,
            content=[
                TextPart(text="What is in this picture? \u00e9\u65e5\U0001f600"),
                ImagePart(url="https://example.com/cat.png", detail="high"),
                ImagePart(data="iVBORw0KGgo=", mime_type="image/png"),
                OpaquePart(kind="audio", data={"format": "wav", "seconds": 1.5}),
            ],
        ),
        Message(
            role="assistant",
            id="a1",
            content="",
            created_at=moment + timedelta(seconds=1),
            tool_calls=[
                ToolCall(id="call_1", name="describe_image", arguments={"detail": "high", "max": 3, "flags": [True]}),
                ToolCall(id="call_2", name="lookup", arguments={}),
            ],
            metadata={"model": "fake-1", "usage": {"input": 10, "output": 3}, "ratio": 0.25, "none": None},
            extras={"langchain": {"type": "ai", "response_metadata": {"finish_reason": "tool_calls"}}},
        ),
        Message(role="tool", tool_call_id="call_1", name="describe_image", content="A cat on a sofa."),
        Message(role="tool", tool_call_id="call_2", name="lookup", content='{"found": false}'),
        Message(role="assistant", content="It is a cat on a sofa.", created_at=datetime(2026, 1, 1, 0, 0)),
        Message(role="user", content="Thanks!"),
        Message(role="user", content="Thanks!"),  # duplicates are kept (CM3)
        Message(role="assistant", content='Multi-line\nreply with "quotes", back\\slashes and \u0000-free text.'),
    ]


def _nested(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = {"d": value}
    return value


def values_at_the_limits() -> dict[str, Any]:
    """A JSON object at every documented limit (`models.MAX_INT_DIGITS`, `models.MAX_JSON_DEPTH`) and at the edges
    of JSON's values: stored as metadata (or anywhere a message holds JSON) it must read back exactly."""
    return {
        "biggest": 10**MAX_INT_DIGITS - 1,
        "smallest": -(10**MAX_INT_DIGITS - 1),
        "past 2**64": 2**64 + 1,
        "deep": _nested(MAX_JSON_DEPTH - 1),  # inside the object itself: exactly MAX_JSON_DEPTH levels
        "tiny": 5e-324,
        "huge": 1.7976931348623157e308,
        "negative zero": -0.0,
        "bool and int": [True, 1, 1.0, False, 0, None],
        "text": "NUL \x00, controls \x1b[31m, \u2028, é, 👩\u200d👩\u200d👧, \U0010ffff",
        "": {"": ""},
    }


OVER_THE_LIMITS: list[dict[str, Any]] = [
    {"n": 10**MAX_INT_DIGITS},
    {"n": [-(10**MAX_INT_DIGITS)]},
    {"deep": _nested(MAX_JSON_DEPTH)},
]
"""JSON objects past a documented limit, refused with `InvalidInputError` before anything is written."""
