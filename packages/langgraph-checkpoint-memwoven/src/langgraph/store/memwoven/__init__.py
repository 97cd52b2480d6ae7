"""LangGraph's long-term memory store on memwoven: `MemwovenStore` (sync and async in one object) and
`AsyncMemwovenStore` (the same store whose lifecycle methods are coroutines, like LangGraph's async stores).

```python
from langgraph.store.memwoven import MemwovenStore

with MemwovenStore.from_url("sqlite:///memory.db") as store:
    store.put(("users", "u1"), "prefs", {"drink": "green tea"})
```
"""

from contextlib import suppress
from importlib import metadata

from langgraph.store.memwoven.aio import AsyncMemwovenStore
from langgraph.store.memwoven.base import (
    DEFAULT_NAMESPACE,
    DistanceType,
    MemwovenIndexConfig,
    MemwovenStore,
    StoreNamespaceError,
)

__version__ = ""  # when running from a source tree that is not installed
with suppress(metadata.PackageNotFoundError):
    __version__ = metadata.version("langgraph-checkpoint-memwoven")

__all__ = [
    "DEFAULT_NAMESPACE",
    "AsyncMemwovenStore",
    "DistanceType",
    "MemwovenIndexConfig",
    "MemwovenStore",
    "StoreNamespaceError",
    "__version__",
]
