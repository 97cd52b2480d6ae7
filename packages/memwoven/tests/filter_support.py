"""Hypothesis strategies shared by the filter tests: filters built from field conditions with memwoven's
combinators."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st


def combined_filters(
    conditions: st.SearchStrategy[dict[str, Any]],
    *,
    merged: st.SearchStrategy[dict[str, Any]] | None = None,
    max_leaves: int = 5,
) -> st.SearchStrategy[dict[str, Any]]:
    """Filters made of `conditions` under `$and`, `$or`, `$not` and implicit conjunction (a filter's fields merged
    with those of `merged`, or of another such filter)."""
    return st.recursive(
        conditions,
        lambda inner: st.one_of(
            st.builds(lambda clauses: {"$and": clauses}, st.lists(inner, min_size=1, max_size=3)),
            st.builds(lambda clauses: {"$or": clauses}, st.lists(inner, min_size=1, max_size=3)),
            st.builds(lambda clause: {"$not": clause}, inner),
            st.builds(lambda a, b: {**a, **b}, inner, inner if merged is None else merged),
        ),
        max_leaves=max_leaves,
    )
