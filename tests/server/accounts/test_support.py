"""Support messages: stored, mailed to the operators through a real SMTP server, listed by
operators (and nobody else) through the operator API."""

from __future__ import annotations

import pytest
from quart.typing import TestClientProtocol as Client

from devyard.server.accounts.settings import AccountsConfig
from devyard.server.store import Store
from tests.polling import eventually

from ..api.conftest import Callers, assert_api_error
from .conftest import SmtpPeer, smtp_accounts


@pytest.fixture
def accounts(smtp_server: SmtpPeer) -> AccountsConfig:
    return smtp_accounts(smtp_server)


async def test_support_reaches_the_operators(
    client: Client, callers: Callers, smtp_server: SmtpPeer, store: Store
) -> None:
    await store.set_operator(callers.other_admin.user_id, True)  # olga@example... has no email
    await store.update_user(callers.other_admin.user_id, email="ops@example.net")
    response = await client.post(
        f"/organizations/{callers.member.org_id}/support",
        json={"message": "my device froze"},
        headers=callers.member.headers,
    )
    assert (response.status_code, await response.get_json()) == (200, {"success": True})
    await eventually(lambda: len(smtp_server.mailbox.messages) == 1)
    _, recipients, message = smtp_server.mailbox.messages[0]
    assert recipients == ["ops@example.net"]
    payload = message.get_payload(decode=True)
    assert isinstance(payload, bytes) and b"my device froze" in payload
    listed = await client.get("/operator/supportMessages", headers=callers.other_admin.headers)
    assert listed.status_code == 200
    [entry] = await listed.get_json()
    assert (entry["message"], entry["organizationId"], entry["userId"]) == (
        "my device froze",
        callers.member.org_id,
        callers.member.user_id,
    )
    # Not an operator: 403, admin or not.
    for caller in (callers.admin, callers.member):
        await assert_api_error(
            await client.get("/operator/supportMessages", headers=caller.headers), 403
        )
    await assert_api_error(
        await client.post(
            f"/organizations/{callers.member.org_id}/support",
            json={"message": ""},
            headers=callers.member.headers,
        ),
        400,
    )
    await assert_api_error(
        await client.post(
            f"/organizations/{callers.member.org_id}/support",
            json={"message": "x"},
            headers=callers.other_admin.headers,
        ),
        404,
    )


async def test_operators_answer_and_feedback_reaches_them(
    client: Client, callers: Callers, smtp_server: SmtpPeer, store: Store
) -> None:
    operator = callers.other_admin
    await store.set_operator(operator.user_id, True)
    await store.update_user(operator.user_id, email="ops@example.net")
    # Anonymous feedback with a reply address: stored and mailed to the operators.
    sent = await client.post("/feedback", json={"message": "nice", "email": "fan@example.org"})
    assert sent.status_code == 200
    await eventually(lambda: len(smtp_server.mailbox.messages) == 1)
    assert smtp_server.mailbox.messages[0][1] == ["ops@example.net"]
    [feedback] = await (
        await client.get("/operator/supportMessages", headers=operator.headers)
    ).get_json()
    assert (feedback["kind"], feedback["email"], feedback["answers"]) == (
        "feedback",
        "fan@example.org",
        [],
    )
    url = f"/operator/supportMessages/{feedback['id']}/answer"
    # Only operators answer; an unknown message is 404.
    for caller in (callers.admin, callers.member):
        await assert_api_error(
            await client.post(url, json={"message": "hi"}, headers=caller.headers), 403
        )
    await assert_api_error(
        await client.post(
            "/operator/supportMessages/fbk_unknown/answer",
            json={"message": "hi"},
            headers=operator.headers,
        ),
        404,
    )
    answered = await client.post(url, json={"message": "thank you!"}, headers=operator.headers)
    assert answered.status_code == 200, await answered.get_data()
    answer = await answered.get_json()
    assert (answer["messageId"], answer["answeredBy"], answer["emailed"]) == (
        feedback["id"],
        operator.user_id,
        True,
    )
    await eventually(lambda: len(smtp_server.mailbox.messages) == 2)
    _, recipients, mail = smtp_server.mailbox.messages[1]
    assert recipients == ["fan@example.org"]
    payload = mail.get_payload(decode=True)
    assert isinstance(payload, bytes) and b"thank you!" in payload
    [listed] = await (
        await client.get("/operator/supportMessages", headers=operator.headers)
    ).get_json()
    assert [a["message"] for a in listed["answers"]] == ["thank you!"]
