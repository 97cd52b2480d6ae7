"""Context window over a 10,000-message session vs a 100-message one: the cost must follow the window, not the history.

Each session (user / assistant turns with a tool call every fifth turn, a system prompt first) is stored in an
`InMemoryChatMemory`; the timed call is `ContextWindow.load()` with a 2,000-token budget (about 60 messages), so
it reads the session and selects its window. Token counts are cached per message, so after the first call a
window touches only the messages it holds. A cold window (a fresh token counter, nothing cached) is reported
too, for reference.
"""

from __future__ import annotations

from harness import Report, measure

from memwoven import InMemoryChatMemory, Message, ToolCall
from memwoven.policies import ContextWindow, MessageTokenCounter, window


def conversation(size: int) -> list[Message]:
    """A system prompt and `size - 1` more messages: turns of user and assistant, some with a tool call."""
    messages = [Message(role="system", content="You are a helpful assistant. Answer briefly and cite your tools.")]
    turn = 0
    while len(messages) < size:
        messages.append(Message(role="user", content=f"Question {turn}: what about item {turn} and its history?"))
        if turn % 5 == 4:
            call = ToolCall(id=f"call-{turn}", name="lookup", arguments={"item": turn, "fields": ["owner", "price"]})
            messages.append(Message(role="assistant", tool_calls=[call]))
            messages.append(Message(role="tool", tool_call_id=f"call-{turn}", content=f'{{"owner": "x{turn}"}}'))
        messages.append(Message(role="assistant", content=f"Item {turn} belongs to x{turn}; " + "details " * 12))
        turn += 1
    return messages[:size]


def run(report: Report, *, quick: bool) -> None:
    """Add the window-cost rows and the <= 2x target (10,000 vs 100 messages) to `report`."""
    runs = 200 if quick else 2_000
    memory = InMemoryChatMemory()
    sizes = (100, 10_000)
    timings = {}
    for size in sizes:
        session = f"window-{size}"
        memory.save(session, conversation(size))
        view = ContextWindow(memory, session, max_tokens=2_000, tokenizer=MessageTokenCounter())
        selected = view.load()  # warms the token cache, as any earlier window over the session would
        timings[size] = measure(view.load, runs=runs, warmup=5)
        report.add(
            "ContextWindow.load (2,000 tokens, cached counts)",
            f"{size:,}-message session",
            timings[size],
            f"{len(selected)} messages selected; {timings[size].median / timings[sizes[0]].median:.2f}x the 100 case",
        )
    history = memory.load(f"window-{sizes[-1]}")
    cold = measure(lambda: window(history, max_tokens=2_000, tokenizer=MessageTokenCounter()), runs=max(10, runs // 20))
    report.add("window() with a fresh token counter (cold)", f"{sizes[-1]:,}-message session", cold)
    report.target(
        "context window: 10,000-message session / 100-message session",
        timings[sizes[-1]].median / timings[sizes[0]].median,
        2.0,
        False,
    )
