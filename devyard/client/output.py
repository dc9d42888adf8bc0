"""What the CLI prints: aligned tables for people, the API's JSON for scripts.

``to_json`` turns the client's models back into the API's JSON (camelCase keys, RFC 3339
times), so ``--json`` output has the shapes of ``openapi.yaml`` whichever command printed it.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any, TextIO

import attrs

from .models import CreatedApiKey

__all__ = ["print_json", "print_record", "print_table", "to_json"]


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def to_json(value: object) -> Any:
    """A model (or list of models) as the API's JSON."""
    if isinstance(value, CreatedApiKey):
        return {**to_json(value.api_key), "key": value.key}
    if attrs.has(type(value)):
        fields = attrs.fields(type(value))  # type: ignore[arg-type]
        return {_camel(f.name): to_json(getattr(value, f.name)) for f in fields}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, enum.Enum):
        return value.value
    return value


def print_json(value: object, out: TextIO) -> None:
    json.dump(to_json(value), out, indent=2)
    out.write("\n")


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, enum.Enum):
        return str(value.value)
    return str(value)


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]], out: TextIO) -> None:
    """Columns padded to their widest cell; ``(none)`` for an empty table."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    lines = [headers, *cells]
    for line in lines:
        out.write("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() + "\n")
    if not rows:
        out.write("(none)\n")


def print_record(pairs: Sequence[tuple[str, object]], out: TextIO) -> None:
    """One object as ``label  value`` lines."""
    width = max(len(label) for label, _ in pairs)
    for label, value in pairs:
        out.write(f"{label.ljust(width)}  {_cell(value)}\n")
