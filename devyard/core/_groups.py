"""Exception-group hygiene for context managers that own a nursery."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["collapse_single_group", "leaves"]


@contextmanager
def collapse_single_group() -> Iterator[None]:
    """Re-raise a group holding exactly one plain exception as that exception.

    A context manager that runs background tasks in its own nursery would otherwise wrap
    whatever its body raises in an ExceptionGroup; our background tasks never raise, so a
    single exception is the body's own and its caller should see it unwrapped.
    """
    try:
        yield
    except BaseExceptionGroup as group:
        if len(group.exceptions) != 1 or isinstance(group.exceptions[0], BaseExceptionGroup):
            raise
        inner = group.exceptions[0]
        context = inner.__context__
        try:
            raise inner
        finally:
            inner.__context__ = context
            del inner


def leaves(exc: BaseException) -> list[BaseException]:
    """The plain exceptions in *exc*: itself, or those of a group and its nested groups (each
    nursery between the raise and the handler adds a level)."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaves(inner)]
    return [exc]
