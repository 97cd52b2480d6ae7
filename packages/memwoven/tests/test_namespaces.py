"""`memwoven.namespaces`: keys map to session ids and back, and no namespace reaches another's sessions."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memwoven.errors import InvalidInputError
from memwoven.namespaces import check_namespace, key_in_namespace, keys_in_namespace, namespaced_id

text = st.text(alphabet=st.sampled_from("a:%3A5é\u0301"), max_size=6)
namespaces = st.one_of(st.just(""), text.map(lambda s: s + ":"))


@given(namespace=namespaces, key=text)
def test_a_key_is_found_back_from_its_session(namespace: str, key: str) -> None:
    session_id = namespaced_id(namespace, key)
    assert session_id.startswith(namespace)
    assert key_in_namespace(namespace, session_id) == key


@given(first=namespaces.filter(bool), second=namespaces.filter(bool), key=text)
def test_no_namespace_sees_the_sessions_of_another(first: str, second: str, key: str) -> None:
    if first != second:
        assert key_in_namespace(second, namespaced_id(first, key)) is None


def test_keys_are_listed_sorted_and_only_for_their_namespace() -> None:
    sessions = ["a:x", "a:b:y", "a:%3A", "a:50%", "b:z", "a:%3a"]
    assert keys_in_namespace("a:", sessions) == [":", "x"]
    assert keys_in_namespace("a:b:", sessions) == ["y"]
    assert keys_in_namespace("", ["b", "a"]) == ["a", "b"]  # no namespace: every session is a key
    assert namespaced_id("t:", "50%:x") == "t:50%25%3Ax"
    assert namespaced_id("", "a:b") == "a:b"


@pytest.mark.parametrize("namespace", ["tenant1", "a:b", "a\uff1a", "\x00:", 1, None])
def test_a_namespace_is_empty_or_ends_with_a_colon(namespace: object) -> None:
    with pytest.raises(InvalidInputError):
        check_namespace(namespace)
    assert check_namespace("") == ""
    assert check_namespace("a:b:") == "a:b:"
