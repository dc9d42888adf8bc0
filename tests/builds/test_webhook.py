"""The build-completion webhook: a real exec in the sandbox (a `BuildHost` in this process),
delivered over HTTPS to a local Hypercorn server with its own CA, signed, with the request's
headers, retried after a 503; bounded attempts against a dead port; bad webhook specs
refused."""

from __future__ import annotations

import hashlib
import hmac
import json
import shutil
import ssl
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from devyard.hostd.builds import BuildHost
from devyard.hostd.builds.commands import plan_exec
from devyard.hostd.builds.errors import BuildError
from devyard.hostd.builds.webhook import WebhookPolicy, deliver, parse_webhook
from devyard.hostd.drivers.base import DeviceSpec, Platform
from devyard.hostd.drivers.gradle import GradleConfig
from devyard.server.tls import ensure_local_ca
from tests.ports import free_port


def _spec(tmp_path: Path) -> DeviceSpec:
    sandbox = tmp_path / "instances" / "inst-1"
    return DeviceSpec(Platform.GRADLE, "inst-1", sandbox, organization_id="org-1")


def test_bad_webhooks_are_refused() -> None:
    base = {"command": "run", "commandLine": "true"}
    for bad in (
        {"url": "http://example.com/hook"},  # not https
        {"url": "https://user:pw@example.com/hook"},
        {"url": "https://example.com/hook", "headers": {f"X-{n}": "v" for n in range(17)}},
        {"url": "https://example.com/hook", "headers": {"Content-Type": "text/plain"}},
        {"url": "https://example.com/hook", "headers": {"X-Devyard-Signature": "forged"}},
        {"url": "https://example.com/hook", "headers": {"X-A": "two\r\nlines"}},
        {"url": "https://example.com/hook", "secret": "short"},
        "https://example.com/hook",
    ):
        with pytest.raises(BuildError) as caught:
            plan_exec({**base, "webhook": bad})
        assert caught.value.reason.value == "bad_request", bad
    plan = plan_exec({**base, "webhook": {"url": "https://example.com/hook"}})
    assert plan.webhook is not None and plan.webhook.generated
    assert len(plan.webhook.secret) == 64 and "secret" not in repr(plan.webhook)


async def test_delivered_signed_with_headers_after_a_retry(tmp_path: Path) -> None:
    if shutil.which("bwrap") is None:
        pytest.skip("needs bubblewrap (scripts/deps)")
    certs = await trio.to_thread.run_sync(ensure_local_ca, tmp_path / "certs", ("127.0.0.1",))
    received: list[tuple[dict[str, str], bytes]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                await send({"type": message["type"] + ".complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        received.append((headers, body))
        status = 503 if len(received) == 1 else 204  # the first attempt fails
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.certfile, config.keyfile = str(certs.cert), str(certs.key)
    trust = ssl.create_default_context(cafile=str(certs.ca_cert))
    policy = WebhookPolicy(
        attempts=3, backoff_s=0.01, timeout_s=10, ssl_context=trust, allow_private=True
    )
    build_config = attrs.evolve(GradleConfig().build_config(_spec(tmp_path)), webhook=policy)
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(partial(serve, app, config, mode="asgi"))  # type: ignore[arg-type]
        port = int(binds[0].rsplit(":", 1)[1])
        host = BuildHost(tmp_path / "build", build_config, nursery)
        await trio.to_thread.run_sync(host.create)

        hook = {"url": f"https://127.0.0.1:{port}/hooks/build", "headers": {"X-Team": "mobile"}}
        run = host.start({"command": "run", "commandLine": "echo hi; exit 3", "webhook": hook})
        assert run.plan.webhook is not None
        secret = run.plan.webhook.secret  # generated: POST /exec answers it as webhookSecret
        dead = f"https://127.0.0.1:{free_port()}/nobody"
        with trio.fail_after(60):
            await run.done.wait()
            await host.wait_reports()
            second = host.start(
                {
                    "command": "run",
                    "commandLine": "true",
                    "webhook": {"url": dead, "secret": "s" * 16},
                }
            )
            await second.done.wait()
            await host.wait_reports()
        nursery.cancel_scope.cancel()

    assert len(received) == 2, "one retry after the 503"
    headers, body = received[1]
    assert received[0][1] == body
    assert headers["x-team"] == "mobile"
    assert headers["content-type"] == "application/json"
    assert headers["x-devyard-event"] == "build.completed"
    assert headers["x-devyard-delivery"] == run.id
    stamp, _, mac = headers["x-devyard-signature"].partition(",v1=")
    timestamp = stamp.removeprefix("t=")
    expected = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    assert hmac.compare_digest(mac, expected.hexdigest())
    payload = json.loads(body)
    assert payload["event"] == "build.completed" and payload["execId"] == run.id
    assert payload["status"] == "FAILED" and payload["exitCode"] == 3
    assert run.describe()["webhook"] == {"delivered": True, "attempts": 2, "status": 204}
    failed = second.describe()["webhook"]
    assert failed["delivered"] is False and failed["attempts"] == 3, failed
    assert failed["error"] == "ConnectError"
    assert secret not in json.dumps(run.describe())


async def test_non_public_addresses_are_not_called() -> None:
    for url in ("https://127.0.0.1:9/hook", "https://10.1.2.3/hook", "https://[::1]/hook"):
        spec = parse_webhook({"url": url})
        assert spec is not None
        outcome = await deliver(spec, {"execId": "build-1"}, WebhookPolicy(attempts=1))
        assert outcome == {
            "delivered": False,
            "attempts": 0,
            "error": "the URL's address is not public",
        }, url
