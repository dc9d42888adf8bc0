"""One cattrs converter from the API's JSON to the client's models.

The models are plain frozen attrs classes named the Python way; the API names its fields in
camelCase. The converter renames every field (``created_at`` <-> ``createdAt``), refuses a
value of the wrong JSON type instead of coercing it (cattrs would turn ``5`` into ``"5"``),
parses timestamps, and turns any shape error into one ``ResponseError`` that names the path
(a wrong server, a proxy's error page), so callers never meet a ``KeyError`` from deep inside a
parse.

cattrs is the [client] extra's: the models import without it (the CLI's argparse declarations
import this package in every install), and the converter is built on the first parse.

Lenient on purpose, as clients of an evolving API are: unknown fields are ignored, a missing
or null optional field is ``None``, missing or null labels are ``{}``. A model with a ``raw``
field keeps the JSON it came from there.
"""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, Self, TypeVar

import attrs

from ._errors import ResponseError

if TYPE_CHECKING:
    import cattrs

__all__ = ["Model", "converter", "structure", "structure_list"]

T = TypeVar("T")
RAW: Final = "raw"


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def structure(data: object, cls: type[T]) -> T:
    """*data* (decoded JSON) as a *cls*, or `ResponseError` saying what did not fit."""
    import cattrs  # noqa: PLC0415  (the [client] extra's; see the module's docstring)

    try:
        return converter().structure(data, cls)
    except ResponseError:
        raise
    except (cattrs.BaseValidationError, ValueError, TypeError, KeyError) as exc:
        where = "; ".join(cattrs.transform_error(exc, path=cls.__name__))
        raise ResponseError(f"unexpected answer from the server: {where}") from None


def structure_list(data: object, cls: type[T]) -> list[T]:
    if not isinstance(data, list):
        raise ResponseError(f"expected a JSON array, got {type(data).__name__}")
    return [structure(item, cls) for item in data]


class Model:
    """A mixin of the models: ``X.from_json(data)`` is ``structure(data, X)``."""

    __slots__ = ()

    @classmethod
    def from_json(cls, data: object) -> Self:
        return structure(data, cls)


# ---- strict scalars -------------------------------------------------------------------------


def _strict(kind: type[T]) -> Callable[[object, type], T]:
    def hook(value: object, _: type) -> T:
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            raise TypeError(f"expected {kind.__name__}, got {value!r}")
        return value

    return hook


def _timestamp(value: object, _: type) -> datetime:
    if not isinstance(value, str):
        raise TypeError(f"expected a timestamp string, got {value!r}")
    return datetime.fromisoformat(value)


def _labels(value: object, _: type) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise TypeError("expected an object of strings")
    return dict(value)


def _free_object(value: object, _: type) -> dict[str, Any]:
    # an opaque object the client passes through (an instance's spec, a credential)
    return dict(value) if isinstance(value, Mapping) else {}


# ---- attrs models: camelCase, missing optionals, raw ----------------------------------------


def _nullable(field: attrs.Attribute[Any]) -> bool:
    """A field whose JSON may be missing: optional (``X | None``) or labels."""
    kind = field.type
    if kind == dict[str, str]:
        return True
    is_union = typing.get_origin(kind) in (typing.Union, types.UnionType)
    return is_union and type(None) in typing.get_args(kind)


def _model_hook(converter: cattrs.Converter, cls: type[Any]) -> Callable[[object, type], Any]:
    from cattrs.gen import make_dict_structure_fn, override  # noqa: PLC0415

    attrs.resolve_types(cls)
    fields = attrs.fields(cls)
    keeps_raw = any(f.name == RAW for f in fields)
    overrides = {
        f.name: override(omit=True) if f.name == RAW else override(rename=camel(f.name))
        for f in fields
    }
    # mypy cannot tell the field overrides from the named options in one **dict
    generated = make_dict_structure_fn(cls, converter, **overrides)  # type: ignore[arg-type]
    nullable = [camel(f.name) for f in fields if f.name != RAW and _nullable(f)]

    def hook(data: object, _: type) -> Any:
        if not isinstance(data, Mapping):
            raise TypeError(f"expected a {cls.__name__} object, got {type(data).__name__}")
        missing = [key for key in nullable if key not in data]
        filled = {**data, **dict.fromkeys(missing)} if missing else data
        value = generated(filled, cls)
        return attrs.evolve(value, raw=dict(data)) if keeps_raw else value

    return hook


@functools.cache
def converter() -> cattrs.Converter:
    """The one converter, built on first use (with the hooks of the models' special shapes)."""
    import cattrs  # noqa: PLC0415

    from . import models, resources  # noqa: PLC0415  (they import this module)

    made = cattrs.Converter(forbid_extra_keys=False)
    for kind in (str, int, bool):
        made.register_structure_hook(kind, _strict(kind))
    made.register_structure_hook(datetime, _timestamp)
    made.register_structure_hook_func(lambda t: t == dict[str, str], _labels)
    made.register_structure_hook_func(lambda t: t == dict[str, Any], _free_object)
    made.register_structure_hook_factory(
        lambda cls: isinstance(cls, type) and issubclass(cls, Model) and attrs.has(cls),
        functools.partial(_model_hook, made),
    )
    for cls, hook in (*models.STRUCTURE_HOOKS, *resources.STRUCTURE_HOOKS):
        made.register_structure_hook(cls, hook)
    return made
