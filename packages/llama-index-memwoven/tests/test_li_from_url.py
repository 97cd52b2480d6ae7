"""`from_url` of MemwovenKVStore, MemwovenDocumentStore and MemwovenIndexStore: the item memory opened by
`open_item_memory` (the URL's options applied, `$MEMWOVEN_ITEM_URL` by default); what one object writes, another
opened from the same URL reads."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from llama_index.core.data_structs.data_structs import IndexDict
from llama_index.core.schema import Document

from llama_index.storage.docstore.memwoven import MemwovenDocumentStore
from llama_index.storage.index_store.memwoven import MemwovenIndexStore
from llama_index.storage.kvstore.memwoven import MemwovenKVStore
from memwoven import InMemoryItemMemory, InvalidInputError, SQLItemMemory
from memwoven.urls import ITEM_URL_VARIABLE


def _tables(path: Path) -> list[str]:
    with sa.create_engine(f"sqlite:///{path}").connect() as connection:
        return sa.inspect(connection).get_table_names()


def test_kvstore(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/kv.db?table_prefix=li_"
    store = MemwovenKVStore.from_url(url, namespace_prefix=("app",))
    assert isinstance(store.items, SQLItemMemory)
    assert store.items.table_prefix == "li_"
    store.put("k", {"v": 1}, collection="c")
    store.close()
    again = MemwovenKVStore.from_url(url, namespace_prefix=("app",))
    assert again.get_all(collection="c") == {"k": {"v": 1}}
    assert again.items.list()[0].namespace == ("app", "c")
    again.close()
    assert "li_items" in _tables(tmp_path / "kv.db")


def test_docstore_and_index_store_share_one_database(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/storage.db"
    docstore = MemwovenDocumentStore.from_url(url, namespace="docs", table_prefix="st_")
    docstore.add_documents([Document(text="hello world", id_="d1", metadata={"foo": "bar"})])
    index_store = MemwovenIndexStore.from_url(url, table_prefix="st_")
    index_store.add_index_struct(IndexDict(index_id="i1"))
    docstore.kvstore.close()
    index_store.kvstore.close()

    reopened = MemwovenDocumentStore.from_url(f"{url}?table_prefix=st_", namespace="docs")
    document = reopened.get_document("d1")
    assert document is not None
    assert document.get_content() == "hello world"
    assert reopened.kvstore.items.namespaces() == [("docs/data",), ("docs/metadata",), ("index_store/data",)]
    reopened.kvstore.close()
    indexes = MemwovenIndexStore.from_url(f"{url}?table_prefix=st_")
    assert [struct.index_id for struct in indexes.index_structs()] == ["i1"]
    indexes.kvstore.close()


def test_the_environment_variable_and_refusals(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ITEM_URL_VARIABLE, "memory://")
    assert isinstance(MemwovenKVStore.from_url().items, InMemoryItemMemory)
    assert isinstance(MemwovenDocumentStore.from_url().kvstore.items, InMemoryItemMemory)
    assert isinstance(MemwovenIndexStore.from_url().kvstore.items, InMemoryItemMemory)
    with pytest.raises(InvalidInputError, match="table_prefix"):
        MemwovenDocumentStore.from_url("memory://", table_prefix="x_")
    with pytest.raises(InvalidInputError, match="vectors only"):
        MemwovenIndexStore.from_url("qdrant+memory://")
    with pytest.raises(InvalidInputError, match="is empty in the URL"):
        MemwovenKVStore.from_url(f"sqlite:///{tmp_path}/never.db?table_prefix=")
    with pytest.raises(InvalidInputError, match="namespace_prefix"):
        MemwovenKVStore.from_url("memory://", namespace_prefix="not a tuple")
    monkeypatch.delenv(ITEM_URL_VARIABLE)
    with pytest.raises(InvalidInputError, match=ITEM_URL_VARIABLE):
        MemwovenKVStore.from_url()
    assert list(tmp_path.iterdir()) == []
