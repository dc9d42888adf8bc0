"""Scope grammar and matching (pure), and which operations of the document admit scoped tokens."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from devyard.server.api._errors import Forbidden
from devyard.server.api.auth import Principal, authorize
from devyard.server.api.contract import Contract, load_document
from devyard.server.api.scopes import Scope, allows, parse_scope, parse_template
from devyard.server.store.base import ApiKey, Organization, Role, User

_T0 = datetime(2030, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    "text",
    ["device:*:install", "device:ios_local_01J0:install", "asset:*:read", "asset:asset_01J:read"],
)
def test_known_scopes_round_trip(text: str) -> None:
    assert str(parse_scope(text)) == text


@pytest.mark.parametrize(
    "text",
    ["", "device", "device:*", "device:*:read", "asset:*:install", "asset:a:b:read",
     "asset::read", "Device:*:install", "asset:a b:read", "asset:*:read "],
)  # fmt: skip
def test_unknown_scopes_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="unknown scope"):
        parse_scope(text)


def test_matching() -> None:
    template = parse_template("device:{id}:install")
    one = parse_scope("device:ios_a:install")
    assert allows([one], template, {"id": "ios_a"})
    assert not allows([one], template, {"id": "ios_b"})
    assert not allows([one], template, {})
    assert allows([parse_scope("device:*:install")], template, {"id": "anything"})
    assert not allows([parse_scope("asset:*:read")], template, {"id": "ios_a"})
    assert not allows([], template, {"id": "ios_a"})
    # A template without a path id needs a wildcard scope.
    listing = parse_template("asset:*:read")
    assert allows([parse_scope("asset:*:read")], listing, {})
    assert not allows([parse_scope("asset:asset_1:read")], listing, {})
    with pytest.raises(ValueError, match="x-devyard-scope"):
        parse_template("device:{id}:fly")


def _principal(scopes: frozenset[Scope] | None) -> Principal:
    return Principal(
        api_key=ApiKey(
            id="key_1", org_id="org_1", user_id="usr_1", lookup_id="L", name="k",
            read_only=False, created_at=_T0,
        ),
        user=User(id="usr_1", name="u", email=None, created_at=_T0),
        organization=Organization(id="org_1", name="o", created_at=_T0),
        role=Role.ADMIN,
        scopes=scopes,
    )  # fmt: skip


def test_only_operations_declaring_a_scope_admit_scoped_tokens() -> None:
    """Every scope there is, wildcarded, opens exactly the operations that declare one."""
    everything = frozenset(parse_scope(s) for s in ("device:*:install", "asset:*:read"))
    scoped, full = _principal(everything), _principal(None)
    contract = Contract(load_document())
    opened = set()
    for op in contract.operations:
        args = {name: "x_1" for name in ("id", "organizationId", "userName", "apiKeyId")}
        authorize(full, least=op.role, safe=op.safe, scope=op.scope, path_args=args)
        try:
            authorize(scoped, least=op.role, safe=op.safe, scope=op.scope, path_args=args)
        except Forbidden as exc:
            assert exc.reason == "insufficient_scope"
            assert op.scope is None, op.operation_id
        else:
            opened.add(op.operation_id)
    assert {f"get{p}Instance" for p in ("Ios", "Android", "Xcode", "Gradle")} <= opened
    assert "getAsset" in opened
    assert not {"listAssets", "upsertAsset", "deleteAsset"} & opened  # upload URLs, writes
    assert not {"createScopedToken", "revokeScopedToken", "getAnalytics", "whoami"} & opened
