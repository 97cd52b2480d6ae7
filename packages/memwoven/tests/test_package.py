"""The package's surface: lazy top-level names, one version source, the models import alone."""

import subprocess
import sys
from importlib import metadata
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest brings tomli there
    import tomli as tomllib

import pytest

import memwoven

HEAVY = ["sqlalchemy", "numpy", "filelock", "tiktoken", "memwoven.backends", "memwoven.urls", "memwoven.contracts"]


def _imported_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; print('\\n'.join(sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.split()
    return {name for name in loaded if any(name == heavy or name.startswith(heavy + ".") for heavy in HEAVY)}


@pytest.mark.parametrize("statement", ["import memwoven.models", "from memwoven import Message, ToolCall"])
def test_the_models_import_no_database_numpy_or_backend(statement: str) -> None:
    assert _imported_after(statement) == set()


def test_a_backend_name_imports_its_module_on_first_use() -> None:
    assert "sqlalchemy" in _imported_after("from memwoven import SQLChatMemory")


def test_every_exported_name_resolves_and_is_listed() -> None:
    assert memwoven.__all__ == sorted(memwoven.__all__)
    for name in memwoven.__all__:
        assert getattr(memwoven, name) is not None, name
    assert set(memwoven.__all__) <= set(dir(memwoven))
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = memwoven.no_such_name  # type: ignore[attr-defined]


def test_version_comes_from_the_distribution() -> None:
    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert memwoven.__version__ == metadata.version("memwoven") == pyproject["project"]["version"]
