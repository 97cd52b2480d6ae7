"""LlamaIndex `MetadataFilters` -> memwoven filter objects (`memwoven.filters`), evaluated by the backend."""

from __future__ import annotations

from typing import Any

from llama_index.core.vector_stores.types import FilterCondition, FilterOperator, MetadataFilter, MetadataFilters

__all__ = ["UnsupportedFilterError", "to_core_filter"]

_COMPARISONS = {
    FilterOperator.EQ: "$eq",
    FilterOperator.NE: "$ne",
    FilterOperator.GT: "$gt",
    FilterOperator.GTE: "$gte",
    FilterOperator.LT: "$lt",
    FilterOperator.LTE: "$lte",
    FilterOperator.IN: "$in",
    FilterOperator.NIN: "$nin",
    FilterOperator.CONTAINS: "$contains",
}


class UnsupportedFilterError(NotImplementedError):
    """A filter operator the memwoven filter language cannot express (the text-match operators)."""


def to_core_filter(filters: MetadataFilters | None) -> dict[str, Any] | None:
    """The memwoven filter for LlamaIndex `filters` (None when there is nothing to filter on)."""
    return None if filters is None else _combine(filters)


def _combine(filters: MetadataFilters) -> dict[str, Any] | None:
    """A group's filter; None (no condition: every node matches) for an empty group, nested or not, as LlamaIndex
    reads one at the top level. So an OR holding an empty group is no condition either, and a NOT matches nothing."""
    if not filters.filters:
        return None
    nested = [_combine(f) if isinstance(f, MetadataFilters) else _clause(f) for f in filters.filters]
    clauses = [clause for clause in nested if clause is not None]
    always = len(clauses) < len(nested)  # an empty group among them
    condition = filters.condition or FilterCondition.AND
    if condition == FilterCondition.AND:
        return None if not clauses else clauses[0] if len(clauses) == 1 else {"$and": clauses}
    if condition == FilterCondition.OR:
        return None if always else {"$or": clauses}
    return {"$not": {} if always else {"$or": clauses}}  # LlamaIndex's NOT: none of the filters matches


def _clause(f: MetadataFilter) -> dict[str, Any]:
    key, value, operator = f.key, f.value, f.operator
    # LlamaIndex takes a null (or missing) value for equal to nothing, None included, and for unequal to anything:
    # `== None` matches nothing, `!= None` everything
    if operator == FilterOperator.EQ and value is None:
        return {key: {"$in": []}}
    if operator == FilterOperator.NE and value is None:
        return {key: {"$nin": []}}
    if operator in (FilterOperator.EQ, FilterOperator.NE) and _with_bools([value]) != [value]:
        return {key: {"$in" if operator == FilterOperator.EQ else "$nin": _with_bools([value])}}
    if operator in (FilterOperator.IN, FilterOperator.NIN) and isinstance(value, list):
        return {key: {_COMPARISONS[operator]: _with_bools(value)}}
    if operator in _COMPARISONS:
        return {key: {_COMPARISONS[operator]: value}}
    values = value if isinstance(value, list) else [value]
    if operator == FilterOperator.ANY:  # the list field holds at least one of the values
        return {"$or": [{key: {"$contains": v}} for v in values]} if values else {key: {"$in": []}}
    if operator == FilterOperator.ALL:  # the list field holds every value
        return {"$and": [{key: {"$contains": v}} for v in values]} if values else {key: {"$exists": True, "$ne": None}}
    if operator == FilterOperator.IS_EMPTY:  # missing, null, "" or []
        return {"$or": [{key: {"$exists": False}}, {key: {"$in": [None, "", []]}}]}
    raise UnsupportedFilterError(
        f"the {operator.value!r} filter operator (substring match) has no memwoven equivalent: "
        "the core filter language has no text-match operator"
    )


def _with_bools(values: list[Any]) -> list[Any]:
    """`values` plus the boolean each 0 or 1 among them stands for: `MetadataFilter` refuses boolean values, so 1 and
    0 are how LlamaIndex asks for them, and its own stores compare with Python's ==, where True == 1."""
    return values + [bool(v) for v in values if type(v) in (int, float) and v in (0, 1)]
