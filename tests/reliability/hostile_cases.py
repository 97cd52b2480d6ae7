# ruff: noqa: E501
"""The hostile input corpus, as data: one case per line, so a new case is one more line.

Each case names what it attacks (`target`), the input, and what every backend must do with it:

- ``REJECT``: raise a typed memwoven error (`memwoven.errors`) before anything is written;
- ``STORE``: store it and give it back exactly (for filters: find exactly the `expected` documents);
- ``EITHER``: one of the two, the backend's choice (a lone surrogate is a valid Python string that an in-process
  backend can keep, but that no UTF-8 store can hold).

`target` is one of: ``ids`` (session ids, stored together: each must come back on its own, none may see another),
``messages`` (saved and appended after a valid message), ``document`` (stored in a batch after a valid document),
``query`` (a search embedding), ``filter`` (a search filter over `FILTER_CORPUS`) and ``url`` (opened, then used
once). Big inputs are built lazily by `value()` so the module imports fast.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

REJECT, STORE, EITHER = "reject", "store", "either"
DIMENSION = 4
OK_VECTOR = [1.0, 0.5, 0.25, 0.125]


@dataclass(frozen=True)
class Case:
    """One hostile input: where it goes, the input (or a builder of it), the required outcome."""

    target: str
    raw: Any
    outcome: str
    expected: frozenset[str] = frozenset()  # filters: the ids that must be found

    def value(self) -> Any:
        """The input itself (built now if it is big)."""
        return self.raw() if isinstance(self.raw, Lazy) else self.raw


@dataclass(frozen=True)
class Lazy:
    """A big input built on demand."""

    build: Callable[[], Any]

    def __call__(self) -> Any:
        return self.build()


def nested(depth: int, leaf: Any = 1) -> Any:
    """A JSON value `depth` objects deep."""
    value = leaf
    for _ in range(depth):
        value = {"a": value}
    return value


def arrays(depth: int, leaf: Any = 1) -> Any:
    """A JSON value `depth` arrays deep."""
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def nested_filter(combinator: str, depth: int) -> Any:
    """A filter of `depth` levels: `combinator` nested around ``{"k": "v"}`` (an odd `depth` of $not keeps its meaning)."""
    value: Any = {"k": "v"}
    for _ in range(depth - 1):
        value = {combinator: value if combinator == "$not" else [value]}
    return value


def ids(*values: Any) -> Case:
    """Session ids stored side by side (a single id, or twins that must stay apart)."""
    return Case("ids", values, STORE)


def bad_id(value: Any) -> Case:
    """A session id that must be refused."""
    return Case("ids", (value,), REJECT)


def msg(**fields: Any) -> dict[str, Any]:
    """A message as a plain dict (role user unless given)."""
    return {"role": "user", **fields}


def vec(*values: Any) -> list[Any]:
    """An embedding as given."""
    return list(values)


def doc(embedding: Any = OK_VECTOR, **fields: Any) -> dict[str, Any]:
    """A document as a plain dict (id "x" unless given)."""
    return {"id": "x", "content": "c", "embedding": embedding, **fields}


def hits(*found: str) -> frozenset[str]:
    """The ids a filter must find."""
    return frozenset(found)


NFC = unicodedata.normalize("NFC", "café Å")
NFD = unicodedata.normalize("NFD", NFC)

# A small corpus for the filter cases: values that look like SQL, glob and RediSearch syntax, and keys with dots.
FILTER_CORPUS = [
    {"id": "a", "metadata": {"k": "v", "n": 1}},
    {"id": "b", "metadata": {"k": "' OR '1'='1", "n": 2}},
    {"id": "c", "metadata": {"k": "*", "tags": ["x", "y"]}},
    {"id": "d", "metadata": {"a.b": 1}},
    {"id": "e", "metadata": {"a": {"b": 1}}},
]

P = pytest.param
# fmt: off
CASES = [
    # session ids -------------------------------------------------------------------------------------------
    P(ids("../../etc/passwd"), id="id-dotdot"),
    P(ids("..\\..\\windows\\system32\\config"), id="id-dotdot-backslash"),
    P(ids("/etc/passwd"), id="id-absolute"),
    P(ids("C:\\Windows\\win.ini"), id="id-drive"),
    P(ids(".", "..", "~", "./."), id="id-dots"),
    P(ids("CON", "nul", "aux.txt", "x.session.jsonl"), id="id-device-names"),
    P(ids("a%", "ab", "a%b", "%"), id="id-percent"),
    P(ids("a_", "ab", "a_b", "_"), id="id-underscore"),
    P(ids("*", "a*", "ab", "**"), id="id-star"),
    P(ids("?", "a?", "ab"), id="id-question"),
    P(ids("[ab]", "a", "b", "[", "[^a]"), id="id-brackets"),
    P(ids("{x}", "x", "{x}y", "{}", "{"), id="id-braces-hash-tag"),
    P(ids("s:msgs", "s", "s:meta", ":", "a:b:c"), id="id-colons"),
    P(ids("'", "''", "'; DROP TABLE memwoven_sessions; --", '"', "`"), id="id-quotes"),
    P(ids("x' OR '1'='1", "x"), id="id-sql-injection"),
    P(ids("\\", "\\\\", "a\\b"), id="id-backslashes"),
    P(ids("Ab", "aB", "AB", "ab"), id="id-case-twins"),
    P(ids(NFC, NFD), id="id-normalization-twins"),
    P(ids("\u212b", "\u00c5", "A\u030a"), id="id-angstrom-twins"),
    P(ids("\uff46\uff55\uff4c\uff4c", "full"), id="id-fullwidth-twins"),
    P(ids("a", "a ", " a", "a\t"), id="id-whitespace-twins"),
    P(ids("ab", "a\u200bb", "a\u00adb"), id="id-invisible-twins"),
    P(ids("line\nbreak", "line\rbreak", "\u2028\u2029"), id="id-line-breaks"),
    P(ids("\u202eevil", "👩\u200d👩\u200d👧", "日本語"), id="id-unicode"),
    P(ids("x" * 10_000), id="id-10kB"),
    P(ids("\u00e9" * 32_768), id="id-64KiB-exactly"),
    P(bad_id("y" * 65_537), id="id-over-64KiB"),
    P(bad_id("nul\x00byte"), id="id-nul"),
    P(bad_id("\x00"), id="id-only-nul"),
    P(bad_id("\ud800"), id="id-lone-high-surrogate"),
    P(bad_id("a\udfffb"), id="id-lone-low-surrogate"),
    P(bad_id(""), id="id-empty"),
    P(bad_id(42), id="id-int"),
    P(bad_id(None), id="id-none"),
    P(bad_id(b"bytes"), id="id-bytes"),
    P(bad_id(["a"]), id="id-list"),
    # messages ----------------------------------------------------------------------------------------------
    P(Case("messages", Lazy(lambda: [msg(content="é" * 5_000_000)]), STORE), id="msg-10MB"),
    P(Case("messages", Lazy(lambda: [msg(content="x", metadata=nested(10_000))]), REJECT), id="msg-nested-10000"),
    P(Case("messages", Lazy(lambda: [msg(content=[{"type": "opaque", "kind": "k", "data": nested(10_000)}])]), REJECT), id="msg-content-nested-10000"),
    P(Case("messages", [msg(content="x", metadata=nested(30))], STORE), id="msg-nested-30"),
    P(Case("messages", [msg(content="x", metadata=nested(64))], STORE), id="msg-nested-64"),
    P(Case("messages", [msg(content="x", metadata=nested(65))], REJECT), id="msg-nested-65"),
    P(Case("messages", [msg(content="x", metadata={"a": arrays(63)})], STORE), id="msg-arrays-64"),
    P(Case("messages", [msg(content="x", metadata={"a": arrays(64)})], REJECT), id="msg-arrays-65"),
    P(Case("messages", [msg(tool_calls=[{"id": "c", "name": "f", "arguments": nested(65)}])], REJECT), id="msg-tool-args-nested-65"),
    P(Case("messages", [msg(content=[{"type": "opaque", "kind": "k", "data": nested(65)}])], REJECT), id="msg-opaque-nested-65"),
    P(Case("messages", [msg(extras={"langchain": nested(65)})], REJECT), id="msg-extras-nested-65"),
    P(Case("messages", [msg(extras={"langchain": nested(64)})], STORE), id="msg-extras-nested-64"),
    P(Case("messages", Lazy(lambda: [msg(metadata={"n": 10**4300 - 1, "m": -(10**4300 - 1)})]), STORE), id="msg-int-4300-digits"),
    P(Case("messages", Lazy(lambda: [msg(metadata={"n": 10**4300})]), REJECT), id="msg-int-4301-digits"),
    P(Case("messages", Lazy(lambda: [msg(metadata={"n": [-(10**4300)]})]), REJECT), id="msg-negative-int-4301-digits"),
    P(Case("messages", Lazy(lambda: [msg(tool_calls=[{"id": "c", "name": "f", "arguments": {"n": 10**5000}}])]), REJECT), id="msg-tool-args-int-5001-digits"),
    P(Case("messages", [msg(role="wizard", content="x")], REJECT), id="msg-unknown-role"),
    P(Case("messages", [msg(role="USER", content="x")], REJECT), id="msg-role-case"),
    P(Case("messages", [msg(role="", content="x")], REJECT), id="msg-empty-role"),
    P(Case("messages", [{"content": "no role"}], REJECT), id="msg-no-role"),
    P(Case("messages", [msg(content=3)], REJECT), id="msg-int-content"),
    P(Case("messages", [msg(content=None)], REJECT), id="msg-none-content"),
    P(Case("messages", [msg(metadata={"x": {1, 2}})], REJECT), id="msg-set"),
    P(Case("messages", [msg(metadata={"x": b"bytes"})], REJECT), id="msg-bytes"),
    P(Case("messages", [msg(metadata={"x": object()})], REJECT), id="msg-object"),
    P(Case("messages", [msg(metadata={1: "int key"})], REJECT), id="msg-int-key"),
    P(Case("messages", [msg(metadata={"x": float("nan")})], REJECT), id="msg-nan"),
    P(Case("messages", [msg(metadata={"x": float("inf")})], REJECT), id="msg-inf"),
    P(Case("messages", [msg(metadata="not an object")], REJECT), id="msg-metadata-string"),
    P(Case("messages", [msg(bogus=1)], REJECT), id="msg-unknown-field"),
    P(Case("messages", [msg(created_at="not a date")], REJECT), id="msg-bad-date"),
    P(Case("messages", [msg(content=[{"type": "image"}])], REJECT), id="msg-image-no-source"),
    P(Case("messages", [msg(content=[{"type": "video", "url": "x"}])], REJECT), id="msg-unknown-part"),
    P(Case("messages", [msg(tool_calls=[{"id": "c", "name": "f", "arguments": "not an object"}])], REJECT), id="msg-bad-tool-args"),
    P(Case("messages", [msg(content="\ud800")], EITHER), id="msg-lone-surrogate"),
    P(Case("messages", [msg(metadata={"\udfff": 1})], EITHER), id="msg-lone-surrogate-key"),
    P(Case("messages", "a string", REJECT), id="msg-string-not-list"),
    P(Case("messages", [42], REJECT), id="msg-int-item"),
    P(Case("messages", {"role": "user"}, REJECT), id="msg-dict-not-list"),
    P(Case("messages", [msg(content="\x00\x01\x1b[31m\x7f")], STORE), id="msg-control-chars"),
    P(Case("messages", [msg(content="' OR 1=1; --", metadata={"$where": "1", "k": "{x}*?[a]%_"})], STORE), id="msg-injection-text"),
    P(Case("messages", [msg(metadata={"big": 2**80, "neg": -(2**70), "tiny": 5e-324, "max": 1.7976931348623157e308})], STORE), id="msg-extreme-numbers"),
    P(Case("messages", [msg(metadata={"z": -0.0, "t": True, "one": 1, "f": 1.0})], STORE), id="msg-json-distinct-values"),
    P(Case("messages", [msg(metadata={"": "empty key", " ": "space", "\u0000": "nul key"})], STORE), id="msg-odd-keys"),
    P(Case("messages", [msg(role="tool", content="r", tool_call_id="../x")], STORE), id="msg-tool-id-path"),
    P(Case("messages", Lazy(lambda: [msg(content=str(i)) for i in range(5_000)]), STORE), id="msg-5000-messages"),
    # documents ---------------------------------------------------------------------------------------------
    P(Case("document", doc(vec(float("nan"), 1.0, 1.0, 1.0)), REJECT), id="doc-nan"),
    P(Case("document", doc(vec(float("inf"), 1.0, 1.0, 1.0)), REJECT), id="doc-inf"),
    P(Case("document", doc(vec(1.0, float("-inf"), 1.0, 1.0)), REJECT), id="doc-minus-inf"),
    P(Case("document", doc(vec(1e39, 1.0, 1.0, 1.0)), REJECT), id="doc-beyond-float32"),
    P(Case("document", doc(vec(1.0, 1.0, 1.0)), REJECT), id="doc-dimension-3"),
    P(Case("document", doc(vec(1.0, 1.0, 1.0, 1.0, 1.0)), REJECT), id="doc-dimension-5"),
    P(Case("document", doc(vec()), REJECT), id="doc-empty-embedding"),
    P(Case("document", doc(vec(0.0, 0.0, 0.0, 0.0)), REJECT), id="doc-zero-vector"),
    P(Case("document", doc(["a", "b", "c", "d"]), REJECT), id="doc-strings"),
    P(Case("document", doc("1234"), REJECT), id="doc-string-embedding"),
    P(Case("document", doc(None), REJECT), id="doc-none-embedding"),
    P(Case("document", doc({"0": 1.0}), REJECT), id="doc-dict-embedding"),
    P(Case("document", doc([[1.0, 1.0, 1.0, 1.0]]), REJECT), id="doc-nested-embedding"),
    P(Case("document", doc(id=""), REJECT), id="doc-empty-id"),
    P(Case("document", doc(id="nul\x00"), REJECT), id="doc-nul-id"),
    P(Case("document", doc(id="\ud800"), REJECT), id="doc-surrogate-id"),
    P(Case("document", doc(id=7), REJECT), id="doc-int-id"),
    P(Case("document", doc(metadata={"x": float("nan")}), REJECT), id="doc-nan-metadata"),
    P(Case("document", Lazy(lambda: doc(metadata=nested(10_000))), REJECT), id="doc-nested-10000"),
    P(Case("document", doc(metadata={"x": "\ud800"}), EITHER), id="doc-surrogate-metadata"),
    P(Case("document", doc(content="\udfff"), EITHER), id="doc-surrogate-content"),
    P(Case("document", doc(metadata=[1, 2]), REJECT), id="doc-metadata-list"),
    P(Case("document", doc(id="../../x", metadata={"k": "' OR 1=1 --"}), STORE), id="doc-hostile-id-and-metadata"),
    P(Case("document", doc(id="{x}*?[a]%_:"), STORE), id="doc-glob-id"),
    P(Case("document", doc(id="z" * 10_000), STORE), id="doc-10kB-id"),
    P(Case("document", doc(vec(3e38, -3e38, 1e-30, 1.0)), REJECT), id="doc-norm-beyond-float32"),
    P(Case("query", vec(3e38, 3e38, 1.0, 1.0), REJECT), id="query-norm-beyond-float32"),
    P(Case("document", doc(vec(1e18, -1e18, 0.5, 1e-3)), STORE), id="doc-extreme-floats"),
    P(Case("document", doc(content="nul and ' quotes", metadata={"nested": nested(30), "big": 2**70, "\x00": "\x00"}), STORE), id="doc-odd-content"),
    P(Case("document", doc(content="\x00 nul"), EITHER), id="doc-nul-content"),  # PostgreSQL text cannot hold NUL
    P(Case("messages", [msg(content="x", metadata=nested(40))], STORE), id="msg-nested-40"),
    P(Case("document", doc(metadata=nested(64)), STORE), id="doc-nested-64"),
    P(Case("document", doc(metadata=nested(65)), REJECT), id="doc-nested-65"),
    P(Case("document", Lazy(lambda: doc(metadata={"n": 10**4300 - 1})), STORE), id="doc-int-4300-digits"),
    P(Case("document", Lazy(lambda: doc(metadata={"n": 10**4300})), REJECT), id="doc-int-4301-digits"),
    P(Case("document", Lazy(lambda: doc(content="é" * 500_000)), STORE), id="doc-1MB-content"),
    # queries -----------------------------------------------------------------------------------------------
    P(Case("query", vec(float("nan"), 1.0, 1.0, 1.0), REJECT), id="query-nan"),
    P(Case("query", vec(float("inf"), 1.0, 1.0, 1.0), REJECT), id="query-inf"),
    P(Case("query", vec(1.0, 1.0), REJECT), id="query-wrong-dimension"),
    P(Case("query", vec(), REJECT), id="query-empty"),
    P(Case("query", vec(0.0, 0.0, 0.0, 0.0), REJECT), id="query-zero"),
    P(Case("query", "1234", REJECT), id="query-string"),
    P(Case("query", None, REJECT), id="query-none"),
    P(Case("query", [[1.0, 1.0, 1.0, 1.0]], REJECT), id="query-nested"),
    P(Case("query", ["a", "b", "c", "d"], REJECT), id="query-strings"),
    # filters -----------------------------------------------------------------------------------------------
    P(Case("filter", {"$where": "1=1"}, REJECT), id="filter-where"),
    P(Case("filter", {"k": {"$regex": ".*"}}, REJECT), id="filter-regex"),
    P(Case("filter", {"k": {"$like": "%"}}, REJECT), id="filter-like"),
    P(Case("filter", {"k": {"$eq": "v", "plain": 1}}, REJECT), id="filter-mixed-keys"),
    P(Case("filter", {"n": {"$in": 1}}, REJECT), id="filter-in-not-list"),
    P(Case("filter", {"n": {"$gt": None}}, REJECT), id="filter-gt-none"),
    P(Case("filter", {"k": {"$exists": "yes"}}, REJECT), id="filter-exists-string"),
    P(Case("filter", {"$or": []}, REJECT), id="filter-empty-or"),
    P(Case("filter", "k = 'v' OR 1=1", REJECT), id="filter-sql-string"),
    P(Case("filter", ["k", "v"], REJECT), id="filter-list"),
    P(Case("filter", {"n": float("nan")}, REJECT), id="filter-nan-value"),
    P(Case("filter", {"n": {"$eq": float("nan")}}, REJECT), id="filter-nan-eq"),
    P(Case("filter", {"n": {"$in": [1, float("inf")]}}, REJECT), id="filter-inf-in"),
    P(Case("filter", {"n": {"$gt": float("-inf")}}, REJECT), id="filter-minus-inf-gt"),
    P(Case("filter", {"tags": {"$contains": float("nan")}}, REJECT), id="filter-nan-contains"),
    P(Case("filter", {"n": {1, 2}}, REJECT), id="filter-set-value"),
    P(Case("filter", {"n": {"$in": [b"x"]}}, REJECT), id="filter-bytes-in"),
    P(Case("filter", {"k": {"$nin": [{"a": float("nan")}]}}, REJECT), id="filter-nan-inside-object"),
    P(Case("filter", Lazy(lambda: nested_filter("$and", 1_000)), REJECT), id="filter-and-1000-deep"),
    P(Case("filter", Lazy(lambda: nested_filter("$not", 1_001)), REJECT), id="filter-not-1001-deep"),
    P(Case("filter", Lazy(lambda: nested_filter("$or", 33)), REJECT), id="filter-or-33-deep"),
    P(Case("filter", Lazy(lambda: nested_filter("$or", 31)), STORE, hits("a")), id="filter-or-31-deep"),
    P(Case("filter", Lazy(lambda: nested_filter("$not", 31)), STORE, hits("a")), id="filter-not-31-deep"),
    P(Case("filter", {"k": "' OR '1'='1"}, STORE, hits("b")), id="filter-sql-value"),
    P(Case("filter", {"k": "v' OR 1=1 --"}, STORE, hits()), id="filter-sql-tail"),
    P(Case("filter", {"k' OR 1=1 --": "v"}, STORE, hits()), id="filter-sql-key"),
    P(Case("filter", {"k": "*"}, STORE, hits("c")), id="filter-glob-value"),
    P(Case("filter", {"k": "%"}, STORE, hits()), id="filter-like-value"),
    P(Case("filter", {"k": "@k:{v}"}, STORE, hits()), id="filter-redisearch-value"),
    # a dotted name matches the literal key ("a.b": d) and reaches into nested objects ("a": {"b": ...}: e)
    P(Case("filter", {"a.b": 1}, STORE, hits("d", "e")), id="filter-dotted-key"),
    P(Case("filter", {"a": {"b": 1}}, STORE, hits("e")), id="filter-object-value"),
    P(Case("filter", {"tags": {"$contains": "x"}}, STORE, hits("c")), id="filter-contains"),
    P(Case("filter", {"$not": {"k": "v"}}, STORE, hits("b", "c", "d", "e")), id="filter-not"),
    P(Case("filter", {"n": {"$gte": 1, "$lt": "2"}}, STORE, hits()), id="filter-mixed-types"),
    # URLs (opened, then used once) -------------------------------------------------------------------------
    P(Case("url", "", REJECT), id="url-empty"),
    P(Case("url", "nope://x", REJECT), id="url-unknown-scheme"),
    P(Case("url", "http://127.0.0.1/", REJECT), id="url-http"),
    P(Case("url", "postgresql+psycopg2://127.0.0.1:1/db", REJECT), id="url-other-driver"),
    P(Case("url", "sqlite://", REJECT), id="url-sqlite-in-memory"),
    P(Case("url", "sqlite:///relative/\x00nul.db", REJECT), id="url-sqlite-nul"),
    P(Case("url", "file:", REJECT), id="url-file-no-path"),
    P(Case("url", "file://remote.example/x", REJECT), id="url-file-remote"),
    P(Case("url", "redis://127.0.0.1:notaport/0", REJECT), id="url-redis-bad-port"),
    P(Case("url", "redis://:s3cret@127.0.0.1:1/0", REJECT), id="url-redis-closed-port"),
    P(Case("url", "redis+cluster://127.0.0.1:1/0", REJECT), id="url-redis-cluster-closed-port"),
    P(Case("url", "redis://127.0.0.1:1/0?prefix=bad prefix", REJECT), id="url-redis-bad-prefix"),
    P(Case("url", "postgresql://u:s3cret@127.0.0.1:1/db", REJECT), id="url-postgres-closed-port"),
    P(Case("url", "postgresql://127.0.0.1:99999/db", REJECT), id="url-postgres-port-out-of-range"),
    P(Case("url", "postgresql://h/db?table_prefix=x;drop", REJECT), id="url-injected-prefix"),
    P(Case("url", "mysql://u:s3cret@127.0.0.1:1/db", REJECT), id="url-mysql-closed-port"),
    P(Case("url", "mysql://[::1/db", REJECT), id="url-broken-ipv6"),
    P(Case("url", "mysql://root@127.0.0.1:3306/test?charset=bogus", REJECT), id="url-mysql-unknown-charset"),
    P(Case("url", "mariadb://root@127.0.0.1:3306/test?charset=utf8mb4&charset=x", REJECT), id="url-mysql-two-charsets"),
    P(Case("url", "qdrant://127.0.0.1:1", REJECT), id="url-qdrant-closed-port"),
    P(Case("url", 42, REJECT), id="url-int"),
]
# fmt: on
