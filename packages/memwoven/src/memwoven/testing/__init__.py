"""The memwoven conformance suite: pytest base classes any backend's tests subclass.

```python
from memwoven.testing import ChatMemoryContract

class TestMyChatMemory(ChatMemoryContract):
    @pytest.fixture
    def chat_memory(self, tmp_path):
        return MyChatMemory(tmp_path)
```

Every test runs against the sync API and against the async twins. The invariants are numbered as in the docs
(CM1-CM10, VM1-VM8, IM1-IM11, E1-E3) and each test's name starts with the invariant it checks.
"""

from memwoven.testing.chat import ChatMemoryContract
from memwoven.testing.embed import EmbedFnContract
from memwoven.testing.items import ItemMemoryContract
from memwoven.testing.samples import HOSTILE_IDS, sample_conversation, turn
from memwoven.testing.vector import VectorMemoryContract

__all__ = [
    "HOSTILE_IDS",
    "ChatMemoryContract",
    "EmbedFnContract",
    "ItemMemoryContract",
    "VectorMemoryContract",
    "sample_conversation",
    "turn",
]
