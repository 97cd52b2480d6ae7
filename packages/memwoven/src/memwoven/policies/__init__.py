"""Memory policies: what goes into the prompt, what is stored, what expires, and agent scratch memory.

Each conversation policy works over any `ChatMemory` (every backend, or another policy); working memory and user
facts are kept in any `ItemMemory`. Every method has an async twin:

* `window` / `ContextWindow`: the messages for a prompt under a message and/or token budget.
* `SummarizingChatMemory`: compacts long sessions into pinned + summary + recent, archiving the originals.
* `TrimmingChatMemory` / `trim`: keeps sessions at `max_messages`, archiving or deleting the oldest;
  `cleanup_expired` for TTLs.
* `WorkingMemory`: a scoped key-value scratchpad. `UserMemory`: facts about a user across sessions.
* `MemoryManager`: conversation + working memory (+ user facts), with `fork` and step sessions.
* `token_counter`, `EstimatingTokenizer` (offline, the default), `TiktokenTokenizer`: token counting.

See docs/policies.md.
"""

from memwoven.policies._base import (
    ARCHIVE_SUFFIX,
    SUMMARIZER_SUFFIX,
    PolicyError,
    WrappingChatMemory,
    archive_id,
    is_summary,
)
from memwoven.policies.limits import TrimmingChatMemory, acleanup_expired, atrim, cleanup_expired, plan_trim, trim
from memwoven.policies.manager import MemoryManager, step_id
from memwoven.policies.summarize import (
    SUMMARY_KEY,
    SUMMARY_PROMPT,
    SummarizationError,
    Summarizer,
    SummarizerLike,
    SummarizingChatMemory,
    Trigger,
    render_transcript,
)
from memwoven.policies.tokens import (
    EstimatingTokenizer,
    MessageTokenCounter,
    TiktokenTokenizer,
    Tokenizer,
    TokenizerLike,
    TokenizerUnavailableError,
    token_counter,
)
from memwoven.policies.user import USER_ROOT, UserMemory, fact_key, normalize_fact
from memwoven.policies.window import ContextWindow, OversizedTurnWarning, Window, window
from memwoven.policies.working import WORKING_ROOT, WorkingMemory

__all__ = [
    "ARCHIVE_SUFFIX",
    "SUMMARIZER_SUFFIX",
    "SUMMARY_KEY",
    "SUMMARY_PROMPT",
    "USER_ROOT",
    "WORKING_ROOT",
    "ContextWindow",
    "EstimatingTokenizer",
    "MemoryManager",
    "MessageTokenCounter",
    "OversizedTurnWarning",
    "PolicyError",
    "SummarizationError",
    "Summarizer",
    "SummarizerLike",
    "SummarizingChatMemory",
    "TiktokenTokenizer",
    "Tokenizer",
    "TokenizerLike",
    "TokenizerUnavailableError",
    "Trigger",
    "TrimmingChatMemory",
    "UserMemory",
    "Window",
    "WorkingMemory",
    "WrappingChatMemory",
    "acleanup_expired",
    "archive_id",
    "atrim",
    "cleanup_expired",
    "fact_key",
    "is_summary",
    "normalize_fact",
    "plan_trim",
    "render_transcript",
    "step_id",
    "token_counter",
    "trim",
    "window",
]
