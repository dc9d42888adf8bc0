"""openapi.yaml as the executable contract: the routes match it, and no input makes a 500."""

from __future__ import annotations

import copy
import itertools
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devyard.server.api.app import api_state, create_app
from devyard.server.api.contract import Contract, load_document
from devyard.server.bootstrap import bootstrap_organization
from devyard.server.config import ServerConfig
from devyard.server.store import Role, Store, open_store

from .conftest import add_caller

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=20), inner, max_size=4)
    ),
    max_leaves=12,
)
FIELDS = st.sampled_from(
    ["name", "email", "role", "userName", "readOnly", "message", "settings", "x"]
)
OBJECTS = st.dictionaries(FIELDS, JSON, max_size=4)


def test_every_operation_names_a_role_or_is_public() -> None:
    for op in Contract(load_document()).operations:
        assert op.auth in {"none", "optional", "required"}
        assert (op.role is None) == (op.auth != "required"), op


def test_the_account_area_is_version_0_1_0_and_every_error_is_an_api_error() -> None:
    document = load_document()
    assert document["info"]["version"] == "0.1.0"
    for path, item in document["paths"].items():
        for method, op in item.items():
            if method == "parameters":
                continue
            for status, response in op["responses"].items():
                if int(status) >= 400:
                    ref = response["$ref"]
                    assert ref in {
                        "#/components/responses/Error",
                        "#/components/responses/RateLimited",
                    }, (path, method, status)


@pytest.mark.parametrize("drop", ["/whoami", "/organizations/{organizationId}/apiKeys"])
async def test_the_app_refuses_to_start_when_routes_and_document_disagree(
    store: Store, config: ServerConfig, drop: str
) -> None:
    document = copy.deepcopy(load_document())
    del document["paths"][drop]
    with pytest.raises(RuntimeError, match=r"routes and openapi\.yaml disagree"):
        create_app(api_state(store, config, contract=Contract(document)))


async def _answers(bodies: list[tuple[int, Any]], data_dir: Path) -> list[tuple[int, Any]]:
    """Send each (target, body) to a fresh app over SQLite; the (status, JSON) answers."""
    async with open_store(str(data_dir / "store.db")) as store:
        boot = await bootstrap_organization(store, org_name="acme", user_name="alice")
        bob = await add_caller(store, boot.organization.id, "bob", Role.MEMBER)
        await add_caller(store, boot.organization.id, "carol", Role.VIEWER)
        app = create_app(api_state(store, ServerConfig(data_dir=data_dir)))
        client = app.test_client()
        org = boot.organization.id
        targets = [
            ("PATCH", f"/organizations/{org}"),
            ("POST", f"/organizations/{org}/members"),
            ("PATCH", f"/organizations/{org}/members/carol"),
            ("POST", f"/organizations/{org}/apiKeys"),
            ("PATCH", "/users/bob"),
            ("POST", "/feedback"),
        ]
        answers = []
        for target, body in bodies:
            method, path = targets[target]
            key = bob.key if path == "/users/bob" else boot.plaintext_key
            response = await client.open(
                path, method=method, json=body, headers={"Authorization": f"Bearer {key}"}
            )
            answers.append((response.status_code, await response.get_json()))
        return answers


_RUNS = itertools.count()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    bodies=st.lists(
        st.tuples(st.integers(min_value=0, max_value=5), st.one_of(JSON, OBJECTS)),
        min_size=1,
        max_size=8,
    )
)
def test_no_body_makes_a_500(tmp_path_factory: pytest.TempPathFactory, bodies: list[Any]) -> None:
    # Synchronous with its own trio.run per example: hypothesis runs examples outside the
    # test's trio run, so the async fixtures cannot be shared with it.
    data_dir = tmp_path_factory.mktemp(f"fuzz{next(_RUNS)}")
    for status, error in trio.run(_answers, bodies, data_dir):
        assert status < 500, error
        if status >= 400:
            assert set(error) <= {"message", "reason"} and error["message"]
