"""Every script in examples/ runs offline, as a user would run it: a fresh process, no arguments, exit code 0.

Each runs in its own temporary working directory with TMPDIR pointing into it (the examples keep their files in
the temporary directory), and with HTTP(S) proxies pointing at a closed port, so an example that tried to reach the
network would fail instead of quietly depending on it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).parents[1] / "examples"
TIMEOUT = 180  # seconds per example; they take a few seconds each
CLOSED_PORT = "http://127.0.0.1:9"

# What each example must print (a new example is run too, and must at least print something).
EXPECTED = {
    "langchain_history_and_retriever.py": ["4 messages in session 'demo'; 3 notes"],
    "llama_index_agent.py": ["According to the notes: The team standup is at 9:30", "12 messages in memory now"],
    "llama_index_storage.py": [
        "indexed 3 documents into",
        "When is the standup? -> [standup] The team standup is at 9:30",
        "How do I get a new laptop? -> [laptops] New laptops are ordered through the IT portal",
    ],
    "summarization_langchain.py": ["Summary of the earlier conversation"],
    "langgraph_store.py": [
        "recalled: My favourite drink is green tea.",
        "memories per user: {'alice': 3, 'bob': 1}",
    ],
    "langgraph_agent.py": [
        "first process: 10 messages in thread-1",
        "second process resumed thread-1 (Ada in the store):",
        "  ai:  -> add({'a': 40, 'b': 2})\n  tool: 42\n  ai: 40 + 2 = 42\n  human: What was my first sum?\n"
        "  ai: Your first sum was 5, Ada.",
        "paused before the tool call: next = ('tools',)",
        "approved in another process: 7 + 8 = 15",
    ],
    "cross_framework_session.py": [
        "assistant: <tool call weather({'city': 'Cortina'})>",
        "user: 'What is in this picture? And the weather in Cortina?' <image image/png>",
        "LangChain's 5 messages came back unchanged, plus LlamaIndex's turn",
    ],
    "custom_backend.py": ["[('user', 'Hello!'), ('assistant', 'Hi, how can I help?')]", " passed"],
}


def _examples() -> list[str]:
    return sorted(path.name for path in EXAMPLES.glob("*.py"))


def test_every_example_with_expectations_exists() -> None:
    assert set(EXPECTED) <= set(_examples())


@pytest.mark.slow
@pytest.mark.parametrize("name", _examples())
def test_example_runs_offline(name: str, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "TMPDIR": str(tmp_path),
        "HTTP_PROXY": CLOSED_PORT,
        "HTTPS_PROXY": CLOSED_PORT,
        "http_proxy": CLOSED_PORT,
        "https_proxy": CLOSED_PORT,
        "NO_PROXY": "",
        "no_proxy": "",
        "PYTHONUNBUFFERED": "1",
    }
    for variable in ("MEMWOVEN_CHAT_URL", "MEMWOVEN_VECTOR_URL"):  # examples must not depend on the environment
        env.pop(variable, None)
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert result.returncode == 0, f"{name} exited with {result.returncode}:\n{result.stdout}\n{result.stderr}"
    assert result.stdout.strip(), f"{name} printed nothing"
    for expected in EXPECTED.get(name, []):
        assert expected in result.stdout, f"{name} did not print {expected!r}:\n{result.stdout}"
