"""SQL backends: SQLite (embedded, the default), PostgreSQL and MariaDB/MySQL through SQLAlchemy 2 Core.

`SQLChatMemory` keeps chat histories one row per message with O(change) saves; `SQLVectorMemory` keeps a
collection of documents and searches it exactly in process; `SQLItemMemory` keeps the items of an `ItemMemory` one
row each, listed by namespace prefix on an index. All have native async twins (SQLAlchemy's
asyncio extension) that run the very same transaction code as the sync methods.
"""

from memwoven.backends.sql._base import SQLOptions
from memwoven.backends.sql.chat import SQLChatMemory
from memwoven.backends.sql.items import SQLItemMemory
from memwoven.backends.sql.vector import SQLVectorMemory

__all__ = ["SQLChatMemory", "SQLItemMemory", "SQLOptions", "SQLVectorMemory"]
