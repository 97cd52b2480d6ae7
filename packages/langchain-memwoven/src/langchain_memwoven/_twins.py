"""`constructor_twins`: `memwoven._steps.twins` for an alternative constructor (a classmethod whose steps make the
object, then run its operations), typed so that a subclass's constructor returns the subclass."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar, cast

from memwoven._steps import Steps, function_twins

__all__ = ["constructor_twins"]

_C = TypeVar("_C")
_P = ParamSpec("_P")


class Constructor(Protocol[_P]):
    """A classmethod making an instance of the class it is called on (its subclass, when called on one)."""

    def __get__(self, instance: object, owner: type[_C], /) -> Callable[_P, _C]: ...


class AsyncConstructor(Protocol[_P]):
    """The async twin of a `Constructor`."""

    def __get__(self, instance: object, owner: type[_C], /) -> Callable[_P, Coroutine[Any, Any, _C]]: ...


def constructor_twins(
    steps: Callable[Concatenate[type[_C], _P], Steps[_C]],
) -> tuple[Constructor[_P], AsyncConstructor[_P]]:
    """The classmethod and its async twin running one steps function (a `staticmethod` taking the class first):
    ``from_x, afrom_x = constructor_twins(_from_x)``, named as `twins` names methods."""
    method, amethod = function_twins(steps)
    return cast("Constructor[_P]", classmethod(method)), cast("AsyncConstructor[_P]", classmethod(amethod))
