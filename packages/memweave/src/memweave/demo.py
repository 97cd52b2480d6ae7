"""The README demo: a short scripted conversation and semantic recall on an embedded SQLite file.

Run with `python -m memweave.demo [--url sqlite:///demo.db]`. Offline: no API key, no model, no server.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Sequence
from pathlib import Path

from memweave.embed import HashingEmbedFn
from memweave.models import Message, ToolCall, VectorDocument
from memweave.urls import open_chat_memory, open_vector_memory, redact_url

NOTES = {
    "trip": "Alice is planning a hiking trip to the Dolomites in July.",
    "diet": "Alice is vegetarian and allergic to peanuts.",
    "work": "Alice works as a data engineer on streaming pipelines.",
    "pet": "Alice has a grey cat called Miso who sleeps on the sofa.",
    "music": "Alice plays jazz piano on weekends.",
}

SCRIPT = [
    Message(role="system", content="You are a helpful travel assistant."),
    Message(role="user", content="Find me a vegetarian restaurant near Cortina for my July trip."),
    Message(
        role="assistant",
        tool_calls=[ToolCall(id="call_1", name="search_restaurants", arguments={"town": "Cortina", "diet": "veg"})],
    ),
    Message(role="tool", tool_call_id="call_1", name="search_restaurants", content='["Baita Fraina", "El Brite"]'),
    Message(role="assistant", content="Baita Fraina and El Brite both have vegetarian menus."),
]


def run(url: str) -> None:
    """Write the scripted conversation and the notes at `url`, then read them back and recall by meaning."""
    embed = HashingEmbedFn(dimension=256)
    print(f"memweave demo on {redact_url(url)}\n")
    with open_chat_memory(url) as chat, open_vector_memory(url, collection="notes", dimension=embed.dimension) as notes:
        session = chat.session("alice/trip-planning")
        session.clear()
        for message in SCRIPT:  # one atomic append per turn, as an agent loop would
            session.append([message])
        print("Conversation stored and reloaded:")
        for message in session.load():
            calls = ", ".join(f"{c.name}({c.arguments})" for c in message.tool_calls)
            print(f"  {message.role:>9}: {message.text or '-> ' + calls}")

        notes.store(
            [VectorDocument(id=k, content=v, embedding=embed(v), metadata={"topic": k}) for k, v in NOTES.items()]
        )
        print(f"\n{notes.count()} notes stored. Semantic recall:")
        for question in ["Which foods is Alice allergic to?", "Where is she hiking in July?", "Does she have a cat?"]:
            best = notes.search(embed(question), top_k=1)[0]
            print(f"  {question:<34} -> {best.document.content}  (score {best.score:.2f})")
        print(f"\nSessions stored: {chat.sessions()}")


def main(argv: Sequence[str] | None = None) -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(prog="python -m memweave.demo", description=__doc__)
    parser.add_argument("--url", help="where to store (default: a SQLite file in a temporary directory)")
    args = parser.parse_args(argv)
    if args.url:
        run(args.url)
        return
    with tempfile.TemporaryDirectory() as directory:
        run(f"sqlite:///{Path(directory) / 'memweave-demo.db'}")


if __name__ == "__main__":
    main()
