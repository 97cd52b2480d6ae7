"""The Python code blocks of the documentation (the READMEs and docs/) run, as written, page by page.

All the blocks of a page run in order in one temporary working directory, so two blocks writing the same file
collide here as they would for a reader running one after the other. A README's blocks each run in a fresh
namespace, as a reader copies one block; a docs page's blocks share one (a later block may use an earlier one's
names). A block that needs a server or an API key is marked with the HTML comment `<!-- not run: reason -->` on
the line just before its opening fence, and only compiled. `OUTPUTS` names what some blocks must print.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
DOCS = ROOT / "docs"
READMES = [ROOT / "README.md", *(ROOT / "packages").glob("*/README.md")]
FENCE = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)
NOT_RUN = re.compile(r"<!--\s*not run:[^>]*-->\s*$")

# page -> {a line of the block: texts its output must contain}
OUTPUTS = {
    "README.md": {
        "notes = EncryptedVectorMemory(stored, key=key)": [
            "My locker code is 4711\n",
            "Alice is allergic to peanuts\n",  # the hit, decrypted
            "mwe2:",  # while the store holds a token
        ],
    },
}


def _pages() -> list[str]:
    pages = [*READMES, *DOCS.rglob("*.md")]
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
    readme = Path(page).name == "README.md"
    expected = dict(OUTPUTS.get(page, {}))
    page_namespace: dict[str, object] = {"__name__": f"docs_{page}"}
    for line, code, runs in _blocks(ROOT / page):
        compiled = compile(code, f"{page}:{line}", "exec")
        if not runs:
            continue
        namespace = {"__name__": f"docs_{page}_{line}"} if readme else page_namespace
        output = io.StringIO()
        with contextlib.redirect_stdout(output):
            exec(compiled, namespace)
        printed = output.getvalue()
        print(printed, end="")  # shown by pytest when the test fails
        for marker in [marker for marker in expected if marker in code]:
            for text in expected.pop(marker):
                assert text in printed, f"{page}:{line} did not print {text!r}"
    assert not expected, f"no block of {page} contains {sorted(expected)}"
