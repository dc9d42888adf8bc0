"""Where the edge finds a request's credential (`edge.asgi.bearer_from`)."""

from __future__ import annotations

import base64

import pytest

from devyard.server.edge.asgi import bearer_from


def _basic(user_password: bytes) -> tuple[bytes, bytes]:
    return (b"Authorization", b"Basic " + base64.b64encode(user_password))


@pytest.mark.parametrize(
    ("headers", "query", "expected"),
    [
        ([(b"authorization", b"Bearer tok_1")], None, "tok_1"),
        ([(b"Authorization", b"bearer  tok_1 ")], None, "tok_1"),
        # Gradle's HTTP build cache sends Basic only: the token is the password
        ([_basic(b"gradle:tok_2")], None, "tok_2"),
        ([_basic(b"any:tok:with:colons")], None, "tok:with:colons"),
        ([_basic(b"no-colon")], None, None),
        ([_basic(b"user:")], None, None),
        ([(b"authorization", b"Basic %%%not-base64")], None, None),
        ([(b"authorization", b"Basic " + base64.b64encode(b"u:\xff\xfe"))], None, None),
        ([(b"authorization", b"Digest abc")], None, None),
        ([], b"token=tok_3&x=1", "tok_3"),
        ([(b"authorization", b"Bearer tok_1")], b"token=tok_3", "tok_1"),
        ([], b"x=1", None),
        ([], None, None),
    ],
)
def test_the_credential_of_a_request(
    headers: list[tuple[bytes, bytes]], query: bytes | None, expected: str | None
) -> None:
    assert bearer_from(headers, query) == expected
