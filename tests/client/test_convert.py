"""The client's one cattrs converter: API JSON (camelCase) to the typed models, strict on
types, lenient on what an evolving API may add or leave out, one `ResponseError` otherwise."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from devyard.client import ResponseError
from devyard.client.models import ApiKey, CreatedApiKey, User, WhoAmI, parse_list
from devyard.client.resources import CreatedTunnel, Instance, InstanceState, Platform, Tunnel

_WHEN = "2026-11-26T08:00:00+00:00"


def _api_key(**extra: Any) -> dict[str, Any]:
    return {
        "id": "key_1",
        "name": "ci",
        "userId": "usr_1",
        "prefix": "dy_ab",
        "readOnly": False,
        "createdAt": _WHEN,
        "lastUsedAt": None,
        **extra,
    }


def _instance(state: str = "ready", **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "id": "android_eu_01J",
            "organizationId": "org_1",
            "createdAt": _WHEN,
            **meta,
        },
        "status": {"state": state, "apiUrl": "https://h/api", "tokenFuture": "x"},
        "spec": {"region": "eu"},
        "unknownTopLevel": 1,
    }


def test_fields_are_renamed_and_timestamps_parsed() -> None:
    key = ApiKey.from_json(_api_key())
    assert key.user_id == "usr_1" and key.read_only is False
    assert key.created_at == datetime(2026, 11, 26, 8, tzinfo=UTC)
    assert key.last_used_at is None and key.revoked_at is None  # null and missing alike


def test_a_wrong_json_type_is_refused_not_coerced() -> None:
    with pytest.raises(ResponseError, match=r"expected str.*User\.name"):
        User.from_json({"id": "usr_1", "name": 5, "email": None, "createdAt": _WHEN})
    with pytest.raises(ResponseError, match=r"ApiKey\.read_only"):
        ApiKey.from_json(_api_key(readOnly="no"))
    with pytest.raises(ResponseError, match="required field missing"):
        ApiKey.from_json({"id": "key_1"})
    with pytest.raises(ResponseError, match="expected a User object"):
        User.from_json("<html>proxy</html>")
    with pytest.raises(ResponseError, match="JSON array"):
        parse_list({"items": []}, User)


def test_nested_errors_name_the_path() -> None:
    user = {"id": "usr_1", "name": "ann", "email": None, "createdAt": _WHEN}
    org = {"id": "org_1", "name": "acme", "createdAt": _WHEN, "settings": {}}
    body = {"user": user, "organization": org, "role": "admin", "apiKey": _api_key()}
    with pytest.raises(ResponseError, match=r"settings\.inactivity_timeout_seconds"):
        WhoAmI.from_json(body)


def test_an_instance_is_flattened_and_keeps_its_json() -> None:
    instance = Instance.from_json(_instance(labels={"team": "qa"}))
    assert instance.platform is Platform.ANDROID and instance.region == "eu"
    assert instance.labels == {"team": "qa"} and instance.display_name is None
    assert instance.status.api_url == "https://h/api"
    assert instance.raw["unknownTopLevel"] == 1  # what the client does not model stays reachable
    assert Instance.from_json(_instance(labels=None)).labels == {}
    assert Instance.from_json(_instance("hibernating")).status.state is InstanceState.UNKNOWN
    with pytest.raises(ResponseError, match="instance id"):
        Instance.from_json({**_instance(), "metadata": {**_instance()["metadata"], "id": "x"}})
    with pytest.raises(ResponseError, match="labels"):
        Instance.from_json(_instance(labels={"team": 1}))


def test_created_secrets_come_from_one_flat_object_and_stay_out_of_repr() -> None:
    created = CreatedApiKey.from_json(_api_key(key="dy_ab_secret"))
    assert created.api_key.id == "key_1" and created.key == "dy_ab_secret"
    assert "secret" not in repr(created)
    tunnel = {
        "id": "tun_1",
        "name": "office",
        "organizationId": "org_1",
        "selectors": ["db:5432"],
        "selectorVersion": 1,
        "ephemeral": False,
        "createdAt": _WHEN,
        "tokenIssuedAt": _WHEN,
        "tokenExpiresAt": _WHEN,
        "status": "offline",
    }
    with_token = CreatedTunnel.from_json({**tunnel, "token": "dyt_secret"})
    assert with_token.tunnel == Tunnel.from_json(tunnel) and with_token.token == "dyt_secret"
    assert with_token.tunnel.standbys == [] and with_token.tunnel.active_connector is None
    with pytest.raises(ResponseError, match="token"):
        CreatedTunnel.from_json(tunnel)
