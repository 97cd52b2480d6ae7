"""A spy on an item memory: which of its operations the LlamaIndex stores call, sync or async, with what."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from functools import wraps
from typing import Any

from memwoven import ItemMemory

OPERATIONS = ["get", "get_many", "put", "put_many", "delete", "delete_many", "list", "count", "namespaces"]


def spy(items: ItemMemory) -> list[tuple[str, Any]]:
    """Record every operation called on `items` (sync and async, by name, with its first argument), in order."""
    calls: list[tuple[str, Any]] = []

    def sync(name: str) -> Callable[..., Any]:
        method = getattr(items, name)

        @wraps(method)
        def recorded(*args: Any, **kwargs: Any) -> Any:
            calls.append((name, args[0] if args else None))
            return method(*args, **kwargs)

        return recorded

    def asynchronous(name: str) -> Callable[..., Coroutine[Any, Any, Any]]:
        method = getattr(items, name)

        @wraps(method)
        async def recorded(*args: Any, **kwargs: Any) -> Any:
            calls.append((name, args[0] if args else None))
            return await method(*args, **kwargs)

        return recorded

    for name in OPERATIONS:
        setattr(items, name, sync(name))
        setattr(items, "a" + name, asynchronous("a" + name))
    return calls
