"""The repository's example (examples/langchain_history_and_retriever.py) runs offline and remembers."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).parents[4] / "examples" / "langchain_history_and_retriever.py"


def test_history_and_retriever_example(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if not EXAMPLE.exists():  # an installed package without the repository around it
        pytest.skip(f"{EXAMPLE} is not here")
    spec = importlib.util.spec_from_file_location("langchain_history_and_retriever", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    first = example.main(tmp_path / "example.db")
    assert first[0].startswith("The office coffee machine")
    assert first[1].startswith("Expense reports")
    assert "(you asked 1 question(s)" in first[1]
    second = example.main(tmp_path / "example.db")
    assert "(you asked 2 question(s)" in second[0]
    assert "8 messages in session 'demo'; 3 notes" in capsys.readouterr().out
