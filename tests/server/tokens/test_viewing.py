"""View tokens (issue 14 finding 3): frames-only stream credentials derived from the stream
token and the credential they were made for, dying with either."""

from __future__ import annotations

import json
import re

from devyard.server.store import Role, Store, tokens
from devyard.server.store.tokens import SCANNER_PATTERNS, TokenKind
from devyard.server.viewing import (
    credential_live,
    verify_view_token,
    view_message_allowed,
    view_token,
)

from .conftest import SetClock


def test_a_view_token_opens_only_its_instance_and_names_its_credential() -> None:
    stream, other_stream = (tokens.new_secret("dys").plaintext for _ in range(2))
    key = tokens.new_api_key()
    token = view_token(stream, key.lookup_id)
    assert re.fullmatch(SCANNER_PATTERNS[TokenKind.VIEW_TOKEN], token)
    assert token == view_token(stream, key.lookup_id)  # derived, so nothing to store
    assert verify_view_token(token, stream) == key.lookup_id
    assert verify_view_token(token, other_stream) is None
    assert verify_view_token(token, None) is None  # the instance ended: tokens cleared
    assert stream.split("_")[2] not in token
    # another credential's lookup spliced in does not verify
    other = tokens.new_api_key().lookup_id
    assert verify_view_token(token.replace(key.lookup_id, other), stream) is None
    assert verify_view_token(stream, stream) is None  # the stream token is no view token


def test_only_frame_requests_pass_the_view_only_filter() -> None:
    allowed = [{"type": "start", "codec": "jpeg", "maxFps": 5}, {"type": "stop"}]
    allowed += [{"type": "requestFrame"}, {"type": "keepAlive"}, {"type": "ack", "count": 3}]
    for message in allowed:
        assert view_message_allowed(json.dumps(message)), message
    refused: list[str | bytes] = [
        json.dumps({"type": kind, "x": 0.5, "y": 0.5, "text": "hi", "url": "https://x"})
        for kind in ("touch", "key", "text", "scroll", "clipboard", "rotate", "openUrl")
    ]
    refused += [json.dumps({"type": "screenshot"}), json.dumps(["start"]), "{", b"\x00"]
    refused += [json.dumps({"type": "start", "pad": "x" * 2000}), "[" * 5000]
    for message in refused:
        assert not view_message_allowed(message), message


async def test_a_view_token_dies_with_the_key_or_scoped_token_it_was_made_for(
    store: Store, store_clock: SetClock
) -> None:
    org = await store.create_organization("acme")
    other_org = await store.create_organization("globex")
    user = await store.create_user("ann")
    await store.add_membership(org.id, user.id, Role.VIEWER)
    secret = tokens.new_api_key()
    key = await store.create_api_key(
        org_id=org.id, user_id=user.id, name="k", lookup_id=secret.lookup_id,
        secret_hash=secret.secret_hash, read_only=True,
    )  # fmt: skip
    scoped = tokens.new_scoped_token()
    await store.create_scoped_token(
        org_id=org.id, api_key_id=key.id, scopes=("device:*:install",), ttl_seconds=60,
        lookup_id=scoped.lookup_id, secret_hash=scoped.secret_hash,
    )  # fmt: skip
    assert await credential_live(store, org.id, secret.lookup_id)
    assert await credential_live(store, org.id, scoped.lookup_id)
    assert not await credential_live(store, other_org.id, secret.lookup_id)
    assert not await credential_live(store, org.id, tokens.new_api_key().lookup_id)
    store_clock.advance(61)
    assert not await credential_live(store, org.id, scoped.lookup_id)  # expired
    await store.revoke_api_key(org.id, key.id)
    assert not await credential_live(store, org.id, secret.lookup_id)
