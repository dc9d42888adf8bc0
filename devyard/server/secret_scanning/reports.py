"""The body of a leaked-token report: GitHub's ``[{token, type, url, source}]``, bounded.

``token`` and ``type`` are required strings; ``url`` (may be empty) and ``source``
(``commit``, ``Content``..., compared case-insensitively) are optional. Anything else, or a
string that is not valid Unicode (a lone surrogate), or more than `MAX_REPORTS` entries, is a
`ReportError`: the API's 400.
"""

from __future__ import annotations

import json
from typing import Any, Final

import attrs

__all__ = ["MAX_REPORTS", "MAX_TOKEN_CHARS", "Report", "ReportError", "parse_reports"]

MAX_REPORTS: Final = 1000
MAX_TOKEN_CHARS: Final = 1024
MAX_TEXT_CHARS: Final = 2048


class ReportError(ValueError):
    """The body is not a list of reports."""


@attrs.frozen
class Report:
    token: str = attrs.field(repr=False)
    type: str
    url: str = ""
    source: str = ""


def _text(entry: dict[str, Any], i: int, name: str, *, required: bool, limit: int) -> str:
    value = entry.get(name)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        need = "a non-empty string" if required else "a string"
        raise ReportError(f"[{i}].{name} must be {need}")
    if len(value) > limit:
        raise ReportError(f"[{i}].{name} is longer than {limit} characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ReportError(f"[{i}].{name} is not valid Unicode") from None
    return value


def parse_reports(body: bytes) -> list[Report]:
    """The reports in *body*; ReportError if it is not the partner format."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        raise ReportError("the body is not JSON") from None
    if not isinstance(data, list):
        raise ReportError("the body must be a JSON list of reports")
    if len(data) > MAX_REPORTS:
        raise ReportError(f"at most {MAX_REPORTS} reports per request")
    reports = []
    for i, entry in enumerate(data):
        if not isinstance(entry, dict):
            raise ReportError(f"[{i}] must be an object")
        reports.append(
            Report(
                token=_text(entry, i, "token", required=True, limit=MAX_TOKEN_CHARS),
                type=_text(entry, i, "type", required=True, limit=MAX_TEXT_CHARS),
                url=_text(entry, i, "url", required=False, limit=MAX_TEXT_CHARS),
                source=_text(entry, i, "source", required=False, limit=MAX_TEXT_CHARS),
            )
        )
    return reports
