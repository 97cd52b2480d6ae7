import inspect

import langchain_memwoven

EXPECTED_ALL = [
    "ChatModelSummarizer",
    "EmbedFnEmbeddings",
    "MemwovenChatMessageHistory",
    "MemwovenVectorStore",
    "__version__",
    "embed_fn_from_embeddings",
    "summarizer_from_chat_model",
]


def test_all_imports() -> None:
    assert sorted(langchain_memwoven.__all__) == sorted(EXPECTED_ALL)


def test_every_public_name_is_documented() -> None:
    for name in EXPECTED_ALL:
        value = getattr(langchain_memwoven, name)
        if name == "__version__":
            assert value == "0.1.0"
            continue
        assert inspect.getdoc(value), name
        if inspect.isclass(value):
            for attribute, member in vars(value).items():
                if not attribute.startswith("_") and (callable(member) or isinstance(member, property)):
                    assert inspect.getdoc(member), f"{name}.{attribute}"
