"""``--field PATH``: a few fields of a command's JSON, one line per result, for scripts.

    devyard android get ID --field status.state             ready
    devyard android list --field metadata.id --field status.state   one "id<TAB>state" a line
    devyard android list --field .                          each instance as one JSON line

A PATH is dot-separated keys, with numbers indexing lists (``items.0.id``) and ``.`` for the
whole value. When the JSON is a list, each item gives a line; a streamed command (``logs -f``,
``exec --json``) prints one JSON document per event and each is selected as it arrives. A
string prints as itself, a missing field as an empty string, anything else as compact JSON.
The selector is a text sink placed between the command and stdout, so every command that
prints JSON supports it without knowing.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from typing import Any, TextIO

__all__ = ["FieldSelector", "SelectError", "select"]

_MISSING = object()


class SelectError(ValueError):
    pass


def _parse(path: str) -> list[str]:
    if path in (".", ""):
        return []
    parts = path.removeprefix(".").split(".")
    if any(not p for p in parts):
        raise SelectError(f"--field {path!r}: empty segment (use keys joined by dots)")
    return parts


def _walk(value: Any, parts: Sequence[str]) -> Any:
    for part in parts:
        if isinstance(value, dict):
            value = value.get(part, _MISSING)
        elif isinstance(value, list) and part.lstrip("-").isdigit():
            index = int(part)
            value = value[index] if -len(value) <= index < len(value) else _MISSING
        else:
            return _MISSING
        if value is _MISSING:
            return _MISSING
    return value


def _text(value: Any) -> str:
    if value is _MISSING or value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"))


def select(document: Any, paths: Sequence[Sequence[str]]) -> list[str]:
    """The output lines of *document* for the parsed *paths*."""
    items = document if isinstance(document, list) else [document]
    return ["\t".join(_text(_walk(item, p)) for p in paths) for item in items]


class FieldSelector(io.StringIO):
    """A text sink that parses the JSON written to it and writes the selected fields to
    *target*, document by document (so a stream of JSON lines is selected as it comes)."""

    def __init__(self, target: TextIO, paths: Sequence[str]) -> None:
        super().__init__()
        self._target = target
        self._paths = [_parse(p) for p in paths]
        self._buffer = ""
        self._decoder = json.JSONDecoder()

    def isatty(self) -> bool:
        return False

    def write(self, text: str) -> int:
        self._buffer += text
        if "\n" in text:
            self._drain(final=False)
        return len(text)

    def _drain(self, *, final: bool) -> None:
        while True:
            rest = self._buffer.lstrip()
            if not rest:
                self._buffer = ""
                return
            try:
                document, end = self._decoder.raw_decode(rest)
            except json.JSONDecodeError:
                if final:  # not JSON after all (a message): pass it through
                    self._target.write(rest)
                    self._buffer = ""
                else:
                    self._buffer = rest
                return
            self._buffer = rest[end:]
            for line in select(document, self._paths):
                self._target.write(line + "\n")
            self._target.flush()

    def flush(self) -> None:
        if not self.closed:
            self._drain(final=True)
            self._target.flush()
