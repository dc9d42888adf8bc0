"""The client side of a link (core/link.py, core/transports.py): bounded dial, upgrade and
hello; refusals as `LinkRefused`; reconnects with backoff; a clean stop. Real sockets on
127.0.0.1 against a raw-upgrade test peer (tests/core/linkpeer.py) and a trio-websocket
server; time on trio's autojump clock."""

from __future__ import annotations

import gc
import json
from functools import partial
from typing import Any

import pytest
import trio
import trio_websocket

from devyard.core import (
    Backoff,
    ControlChannel,
    Session,
    UpgradeRejected,
    UpgradeRequest,
    open_session,
)
from devyard.core.link import HELLO_TIMEOUT, LinkRefused, run_link
from devyard.core.transports import DIAL_TIMEOUT, open_transport

from .linkpeer import open_link_peer, register


async def _silent(stream: trio.SocketStream) -> None:
    await trio.sleep_forever()  # accepts TCP, never answers


@pytest.mark.parametrize("scheme", ["tcp", "ws"])
async def test_a_server_that_never_answers_the_upgrade_does_not_hang_the_dial(
    scheme: str, autojump_clock: trio.abc.Clock
) -> None:
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, _silent, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        started = trio.current_time()
        with trio.fail_after(DIAL_TIMEOUT * 3), pytest.raises(TimeoutError):
            async with open_transport(f"{scheme}://127.0.0.1:{port}/v1/host_connections"):
                pass
        assert trio.current_time() - started == pytest.approx(DIAL_TIMEOUT, abs=1)
        nursery.cancel_scope.cancel()


def _hello() -> dict[str, Any]:
    return {"type": "hello", "proto": 1, "role": "host", "id": "test"}


async def _never_called(session: Session, control: ControlChannel, registered: Any) -> None:
    raise AssertionError("not registered, so never served")


async def _hold_forever(session: Session, control: ControlChannel) -> None:
    await trio.sleep_forever()


def _refuse(status: int, body: dict[str, str]) -> Any:
    async def handler(number: int, request: UpgradeRequest) -> None:
        await request.reject(status, json.dumps(body).encode())

    return handler


@pytest.mark.parametrize("status", [401, 403])
async def test_401_and_403_end_the_link_for_good_with_the_edges_reason(
    status: int, autojump_clock: trio.abc.Clock
) -> None:
    body = {"message": "invalid host token", "reason": "unauthorized"}
    async with open_link_peer(_refuse(status, body)) as peer:
        with trio.fail_after(60), pytest.raises(LinkRefused) as refused:
            await run_link(
                peer.url(), "s3cret", _hello, _never_called,
                backoff=Backoff(), shutdown=trio.Event(),
            )  # fmt: skip
    assert (refused.value.code, refused.value.permanent) == ("unauthorized", True)
    assert (refused.value.status, refused.value.message) == (status, "invalid host token")
    assert peer.connections == 1, "a permanent refusal is never retried"


async def test_other_refusals_are_retried_with_backoff(autojump_clock: trio.abc.Clock) -> None:
    async def handler(number: int, request: UpgradeRequest) -> None:
        status = 503 if number < 3 else 401
        await request.reject(status, b'{"message": "busy", "reason": "unavailable"}')

    async with open_link_peer(handler) as peer:
        with trio.fail_after(600), pytest.raises(LinkRefused):
            await run_link(
                peer.url(), "s3cret", _hello, _never_called,
                backoff=Backoff(base=1.0), shutdown=trio.Event(),
            )  # fmt: skip
    assert peer.connections == 4


async def test_an_unanswered_hello_is_bounded_then_retried(autojump_clock: trio.abc.Clock) -> None:
    shutdown = trio.Event()

    async def handler(number: int, request: UpgradeRequest) -> None:
        stream = await request.accept()
        async with open_session(stream, client=False) as session:
            control = ControlChannel(await session.accept_stream())
            peer.hellos.append(await control.receive())
            peer.note()
            await trio.sleep_forever()  # never says registered

    async with open_link_peer(handler) as peer, trio.open_nursery() as nursery:
        nursery.start_soon(
            partial(
                run_link, peer.url(), "s3cret", _hello, _never_called,
                backoff=Backoff(base=0.1), shutdown=shutdown,
            )
        )  # fmt: skip
        with trio.fail_after(HELLO_TIMEOUT * 3):
            await peer.wait_for(lambda: len(peer.hellos) == 2)
        shutdown.set()  # cancels the pending attempt: run_link returns
    assert peer.hellos[0]["type"] == "hello"


async def test_a_permanent_error_reply_ends_for_good(autojump_clock: trio.abc.Clock) -> None:
    refusal = {"type": "error", "code": "bad-hello", "message": "no", "permanent": True}

    async def handler(number: int, request: UpgradeRequest) -> None:
        await register(peer, request, refusal, _hold_forever)

    async with open_link_peer(handler) as peer:
        with trio.fail_after(60), pytest.raises(LinkRefused) as refused:
            await run_link(
                peer.url(), "s3cret", _hello, _never_called,
                backoff=Backoff(), shutdown=trio.Event(),
            )  # fmt: skip
    assert (refused.value.code, refused.value.permanent, refused.value.status) == (
        "bad-hello",
        True,
        None,
    )


async def test_registered_runs_the_body_reconnects_when_it_ends_and_stops_on_shutdown(
    autojump_clock: trio.abc.Clock,
) -> None:
    shutdown = trio.Event()
    served: list[dict[str, Any]] = []

    async def handler(number: int, request: UpgradeRequest) -> None:
        registered = {"type": "registered", "n": number}
        await register(peer, request, registered, _hold)

    async def _hold(session: Session, control: ControlChannel) -> None:
        await session.wait_ended()

    async def body(session: Session, control: ControlChannel, registered: dict[str, Any]) -> None:
        served.append(registered)
        if len(served) == 2:
            shutdown.set()
        # the first time the body just returns: the link counts as lost

    async with open_link_peer(handler) as peer:
        with trio.fail_after(60):
            await run_link(peer.url(), "s3cret", _hello, body, backoff=Backoff(), shutdown=shutdown)
    assert [r["n"] for r in served] == [0, 1]
    assert len(peer.hellos) == 2


async def test_a_websocket_refusal_is_the_same_refusal_and_closes_its_socket(
    autojump_clock: trio.abc.Clock,
) -> None:
    async def handler(request: trio_websocket.WebSocketRequest) -> None:
        await request.reject(403, body=b'{"message": "revoked", "reason": "forbidden"}')

    async with trio.open_nursery() as nursery:
        server = await nursery.start(
            partial(trio_websocket.serve_websocket, handler, "127.0.0.1", 0, ssl_context=None)
        )
        url = f"ws://127.0.0.1:{server.port}/v1/connector_connections"
        with trio.fail_after(60), pytest.raises(UpgradeRejected) as rejected:
            async with open_transport(url):
                pass
        assert rejected.value.status_code == 403
        with trio.fail_after(60), pytest.raises(LinkRefused) as refused:
            await run_link(
                url, "s3cret", _hello, _never_called, backoff=Backoff(), shutdown=trio.Event()
            )
        assert (refused.value.code, refused.value.permanent) == ("forbidden", True)
        del rejected, refused
        gc.collect()  # an unclosed socket would warn here (and fail: filterwarnings=error)
        nursery.cancel_scope.cancel()
