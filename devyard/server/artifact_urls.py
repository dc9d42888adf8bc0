"""Signed URLs for a build instance's artifacts (docs/builds.md, "Artifacts").

A build's collected artifacts are served by the instance's ``apiUrl`` at
``exec/{execId}/artifacts/{path}``, which takes the instance token in ``Authorization``. The
build-log listing hands a member a URL that needs no header: the same path with
``?expires=E&signature=S``, where S is HMAC-SHA256 keyed by the instance token over the
instance id, that path and E. The edge checks it against the token it keeps for the instance,
in constant time, and lets the signed URL do exactly one thing: GET that one path, until E.
The token is cleared when the instance ends, so its URLs die with it (an artifact meant to
outlive the instance is uploaded as an asset).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from typing import Final
from urllib.parse import quote

__all__ = ["ARTIFACT_TTL", "artifact_url", "is_artifact_path", "signature", "verify"]

#: How long a listed artifact URL works (the build-log listing mints fresh ones on each call).
ARTIFACT_TTL: Final = 3600
_CONTEXT: Final = b"devyard-artifact-v1"
_PATH: Final = re.compile(r"exec/[A-Za-z0-9._-]{1,100}/artifacts/[^?#]{1,1024}")


def is_artifact_path(rest: str) -> bool:
    """Is *rest* (the part of an ``apiUrl`` path after ``api/``) an artifact's?"""
    return _PATH.fullmatch(rest) is not None and ".." not in rest.split("/")


def signature(token: str, instance_id: str, rest: str, expires: int) -> str:
    message = b"\n".join((_CONTEXT, instance_id.encode(), rest.encode(), str(expires).encode()))
    return hmac.new(token.encode(), message, hashlib.sha256).hexdigest()


def artifact_url(
    api_url: str,
    token: str,
    instance_id: str,
    exec_id: str,
    path: str,
    *,
    now: float | None = None,
    ttl: int = ARTIFACT_TTL,
) -> str:
    """The signed URL of artifact *path* of exec *exec_id*."""
    expires = int(time.time() if now is None else now) + ttl
    rest = f"exec/{exec_id}/artifacts/{path}"
    signed = signature(token, instance_id, rest, expires)
    return f"{api_url.rstrip('/')}/{quote(rest)}?expires={expires}&signature={signed}"


def verify(
    token: str, instance_id: str, rest: str, query: dict[str, str], *, now: float | None = None
) -> bool:
    """Does *query* sign *rest* of *instance_id* with *token*, and is it not expired?"""
    expires, given = query.get("expires", ""), query.get("signature", "")
    if not expires.isdigit() or len(expires) > 12 or not given or not is_artifact_path(rest):
        return False
    if int(expires) < (time.time() if now is None else now):
        return False
    return hmac.compare_digest(given, signature(token, instance_id, rest, int(expires)))
