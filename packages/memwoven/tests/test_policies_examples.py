"""The summarization examples (examples/summarization_*.py) run offline and keep every message."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from memwoven import Message
from memwoven.policies import is_summary

EXAMPLES = Path(__file__).parents[3] / "examples"


def _load(name: str, needs: str) -> ModuleType:
    pytest.importorskip(needs)
    path = EXAMPLES / f"{name}.py"
    if not path.exists():  # an installed package without the repository around it
        pytest.skip(f"{path} is not here")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _check(result: dict[str, Any], questions: list[str], written: int) -> None:
    stored: list[Message] = result["stored"]
    archived: list[Message] = result["archived"]
    summaries = [m for m in stored if is_summary(m)]
    assert len(summaries) == 1
    assert len(stored) <= 10
    assert summaries[0].metadata["memwoven_summary"]["layers"] >= 2
    assert len(stored) - 1 + len(archived) == written  # every message stored or archived, once
    history = [m for message in stored for m in (archived if is_summary(message) else [message])]
    assert [m.text for m in history if m.role == "user"] == questions
    summarized = [q for q in questions if q in summaries[0].text]  # the summary lists what it replaced
    assert summarized
    assert all(q in [m.text for m in archived] for q in summarized)


def test_langchain_example(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    example = _load("summarization_langchain", "langchain_core")
    result = example.main(tmp_path / "lc.db")
    _check(result, example.QUESTIONS, len(example.QUESTIONS) * 2 + 1)
    assert result["window"].messages[0].text == "You are a friendly travel assistant."
    assert "6 stored, 12 archived" in capsys.readouterr().out


def test_llama_index_example(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    example = _load("summarization_llama_index", "llama_index.core")
    result = example.main(tmp_path / "li.db")
    for run in ("sync", "async"):
        _check(result[run], example.QUESTIONS, len(example.QUESTIONS) * 2)
    assert "[trip-async] 16 messages written; 6 stored, 11 archived" in capsys.readouterr().out
