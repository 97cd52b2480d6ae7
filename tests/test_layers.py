"""The import contract: data flows one way through memwoven's layers, and private modules stay private.

    errors, _redact, _steps, _cache, _clock, _durable -> models, filters -> contracts -> helpers -> backends
    -> policies, encryption -> urls -> testing, cli, adapters

A module imports only from its own layer or the layers below; a backend never imports another backend (shared
pieces live in a private module of `memwoven.backends`); a private module (`_name`) is imported only from inside
the package that holds it (the adapters may use memwoven's runtime pieces, `RUNTIME`: the step engine, the clock
expiry is measured on, which tests freeze, and the LRU cache). Checked on the source text
(every `import`, at any depth), so a lazy import inside a function counts too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1] / "packages"
LAYERS = [
    [
        "memwoven.errors",
        "memwoven._redact",
        "memwoven._steps",
        "memwoven._cache",
        "memwoven._clock",
        "memwoven._durable",
    ],
    ["memwoven.models", "memwoven.filters"],
    ["memwoven.contracts"],
    [
        "memwoven.history",
        "memwoven.vector_index",
        "memwoven._columns",
        "memwoven._vector_cache",
        "memwoven.namespaces",
        "memwoven.embed",
    ],
    ["memwoven.backends"],
    ["memwoven.policies", "memwoven.encryption"],
    ["memwoven.urls"],
    ["memwoven.testing", "memwoven.cli", "memwoven", "langchain_memwoven", "langgraph", "llama_index"],
]


def _layer(module: str) -> int:
    """The layer of `module`: that of the longest listed name it is, or lies under."""
    best, found = -1, -1
    for index, names in enumerate(LAYERS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > best:
                best, found = len(name), index
    return found


def _modules() -> dict[str, Path]:
    found = {}
    sources = ("memwoven", "langchain-memwoven", "langgraph-checkpoint-memwoven", "llama-index-memwoven")
    for source in (f"{name}/src" for name in sources):
        base = ROOT / source
        for path in base.rglob("*.py"):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imports(module: str, path: Path) -> list[str]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            names.append(base)
    ours = ("memwoven", "langchain_memwoven", "llama_index", "langgraph")
    return [name for name in names if name.split(".")[0] in ours]


MODULES = _modules()
RUNTIME = ("memwoven._steps", "memwoven._clock", "memwoven._cache")


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_flow_down_the_layers(module: str) -> None:
    mine = _layer(module)
    wrong = []
    for imported in _imports(module, MODULES[module]):
        if imported.startswith(("llama_index.core", "langgraph.store.base")) or _layer(imported) < 0:
            continue  # the framework itself, not ours
        if _layer(imported) > mine:
            wrong.append(f"{imported} (layer {_layer(imported)} > {mine})")
        backend, other = module.split(".")[:3], imported.split(".")[:3]
        if (
            backend[:2] == other[:2] == ["memwoven", "backends"]
            and len(backend) == len(other) == 3
            and backend[2] != other[2]
            and not other[2].startswith("_")
        ):
            wrong.append(f"{imported} (another backend)")
        private = next((i for i, part in enumerate(imported.split(".")) if part.startswith("_")), None)
        if private is not None and not (imported in RUNTIME and module.split(".")[0] != "memwoven"):
            owner = ".".join(imported.split(".")[:private])
            if not (module == owner or module.startswith(owner + ".")):
                wrong.append(f"{imported} (private to {owner})")
    assert wrong == [], f"{module} imports {wrong}"
