"""Shared test setup for langchain-memwoven.

* LangChain's standard test classes contain unmarked `async def` tests and expect pytest-asyncio's auto mode; the
  workspace runs strict mode, so this package's coroutine tests get the `asyncio` marker here.
* `BaseChatMessageHistory` and `RunnableWithMessageHistory` are deprecated upstream but this package supports
  them, so their deprecation warnings are not reported for these tests.
"""

from __future__ import annotations

import inspect
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
DEPRECATIONS = pytest.mark.filterwarnings("ignore::langchain_core._api.deprecation.LangChainDeprecationWarning")


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: object) -> Generator[None, Any, None]:
    outcome = yield
    result = outcome.get_result()
    for item in result if isinstance(result, list) else [result]:
        if isinstance(item, pytest.Function) and inspect.iscoroutinefunction(item.obj):
            item.add_marker(pytest.mark.asyncio)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(DEPRECATIONS)
