"""The Python code blocks of the documentation (README.md and docs/) run, as written, page by page.

The blocks of one page run in order in one namespace (a page's later blocks may use its earlier ones), in a
temporary working directory. A block that needs a server or an API key is marked with the HTML comment
`<!-- not run: reason -->` on the line just before its opening fence, and only compiled.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
DOCS = ROOT / "docs"
FENCE = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)
NOT_RUN = re.compile(r"<!--\s*not run:[^>]*-->\s*$")


def _pages() -> list[str]:
    pages = [ROOT / "README.md", *DOCS.rglob("*.md")]
    return sorted(str(path.relative_to(ROOT)) for path in pages if FENCE.search(path.read_text()))


def _blocks(page: Path) -> list[tuple[int, str, bool]]:
    """(line number, code, runs) of each Python block of a page."""
    text = page.read_text()
    blocks = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        blocks.append((text.count("\n", 0, match.start()) + 2, match.group(1), not NOT_RUN.search(before)))
    return blocks


@pytest.mark.parametrize("page", _pages())
def test_python_blocks_run(page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for variable in ("MEMWOVEN_CHAT_URL", "MEMWOVEN_VECTOR_URL"):
        monkeypatch.delenv(variable, raising=False)
    namespace: dict[str, object] = {"__name__": f"docs_{page}"}
    for line, code, runs in _blocks(ROOT / page):
        compiled = compile(code, f"{page}:{line}", "exec")
        if runs:
            exec(compiled, namespace)
