"""LangGraph's checkpointer (short-term, per-thread memory) on memwoven: `MemwovenSaver` (sync and async methods
in one object) and `AsyncMemwovenSaver` (the same saver whose `setup` is a coroutine, like LangGraph's async
savers), on every backend with an item memory.

```python
from langgraph.checkpoint.memwoven import MemwovenSaver

with MemwovenSaver.from_url("sqlite:///checkpoints.db") as saver:
    graph = builder.compile(checkpointer=saver)
```
"""

from langgraph.checkpoint.memwoven.aio import AsyncMemwovenSaver
from langgraph.checkpoint.memwoven.base import MemwovenSaver, ThreadDeletedError, ThreadInfo, ThreadTTLConfig

__all__ = ["AsyncMemwovenSaver", "MemwovenSaver", "ThreadDeletedError", "ThreadInfo", "ThreadTTLConfig"]
