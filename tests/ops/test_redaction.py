"""What the access log shows of a request target: never a credential (requestlog.py)."""

from __future__ import annotations

import pytest

from devyard.server.api.requestlog import redact_target

SECRET = "dys_0123456789abcdef_s3cr3ts3cr3ts3cr3t"


@pytest.mark.parametrize(
    ("path", "query", "shown"),
    [
        ("/v1/instances/i/watch", f"token={SECRET}", "/v1/instances/i/watch?token=REDACTED"),
        ("/blobs/a", "sig=abc&exp=1", "/blobs/a?sig=REDACTED&exp=1"),
        (
            "/x",
            "api_key=k&Access_Token=t&password=p",
            "/x?api_key=REDACTED&Access_Token=REDACTED&password=REDACTED",
        ),
        ("/x", f"next={SECRET}", "/x?next=REDACTED"),
        (f"/v1/{SECRET}/y", "", "/v1/REDACTED/y"),
        (
            "/v1/android_instances",
            "labelSelector=pr%3D42",
            "/v1/android_instances?labelSelector=pr%3D42",
        ),
        ("/readyz", "", "/readyz"),
    ],
)
def test_secrets_in_targets_are_redacted(path: str, query: str, shown: str) -> None:
    assert redact_target(path, query.encode()) == shown
