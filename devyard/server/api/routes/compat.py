"""Which response shape a caller reads, where the commercial service's SDKs and devyard's own
spec differ (docs/compatibility.md, "The shape rule").

The instance lists are the one case: the spec answers a page object ``{items, hasMore}``;
the commercial service's TypeScript SDK (``@limrun/api``) and its ``lim`` CLI, which is built
on it, read a bare array. Both identify themselves with the generated SDKs' platform header
``X-Stainless-Lang: js``; they get the array, everyone else the page object. The Python SDK
(``X-Stainless-Lang: python``) reads either and gets the page object.
"""

from __future__ import annotations

from typing import Final

from quart import request

__all__ = ["BARE_LIST_LANGS", "bare_list_client"]

# Values of X-Stainless-Lang whose SDKs read a list as a bare JSON array.
BARE_LIST_LANGS: Final = frozenset({"js"})


def bare_list_client() -> bool:
    """The caller reads lists as a bare array (the TypeScript SDK, ``lim``)."""
    return request.headers.get("X-Stainless-Lang", "").strip().lower() in BARE_LIST_LANGS
