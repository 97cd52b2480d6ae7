"""Command groups other distributions add to `memwoven` (entry point group ``memwoven.cli``): a plugin becomes a
group; one that does not import, is no typer.Typer or takes a core command's name is skipped with a one-line
warning; a core command never loads plugins."""

from __future__ import annotations

import importlib.metadata
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from memwoven.cli import _app

hello = typer.Typer(help="Say hello.", no_args_is_help=True)


@hello.command("greet")
def greet(name: str) -> None:
    """Greet NAME."""
    typer.echo(f"hello {name}")


def entry(name: str, value: str) -> importlib.metadata.EntryPoint:
    return importlib.metadata.EntryPoint(name=name, value=value, group=_app.PLUGIN_GROUP)


PLUGINS = [
    entry("hello", f"{__name__}:hello"),
    entry("broken", "memwoven_no_such_module:app"),
    entry("odd", f"{__name__}:greet"),
    entry("sessions", f"{__name__}:hello"),
]


@pytest.fixture
def plugins(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The entry points above installed (the command line's groups restored afterwards); the groups asked for."""
    asked: list[str] = []

    def entry_points(**selection: Any) -> list[importlib.metadata.EntryPoint]:
        asked.append(selection["group"])
        return PLUGINS

    monkeypatch.setattr(_app.app, "registered_groups", list(_app.app.registered_groups))
    monkeypatch.setattr(_app, "_plugins_loaded", False)
    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    return asked


def test_a_plugin_is_a_group_and_a_broken_one_a_warning(plugins: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert _app.add_plugins(_app.app) == ["hello"]
    assert plugins == ["memwoven.cli"]
    warnings = capsys.readouterr().err.splitlines()
    assert len(warnings) == 3
    assert all(line.startswith("memwoven: warning: plugin ") for line in warnings)
    assert "'broken' (memwoven_no_such_module:app) skipped: ModuleNotFoundError" in warnings[0]
    assert "not a typer.Typer" in warnings[1]
    assert "'sessions'" in warnings[2]
    assert "exists already" in warnings[2]
    result = CliRunner().invoke(_app.app, ["hello", "greet", "world"])
    assert (result.exit_code, result.stdout) == (0, "hello world\n")
    assert "sessions" in CliRunner().invoke(_app.app, ["--help"]).stdout  # the core's group untouched


def test_run_loads_plugins_once_and_never_for_a_core_command(
    plugins: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        _app.run(["sessions", "--help"])
    assert done.value.code == 0
    assert plugins == []  # nothing of a plugin imported for a core command
    for _ in range(2):
        with pytest.raises(SystemExit) as done:
            _app.run(["hello", "greet", "you"])
        assert done.value.code == 0
    assert plugins == ["memwoven.cli"]
    captured = capsys.readouterr()
    assert captured.out.endswith("hello you\nhello you\n")
    assert len(captured.err.splitlines()) == 3  # the warnings, once
    with pytest.raises(SystemExit):
        _app.run(["--help"])
    assert "hello" in capsys.readouterr().out
