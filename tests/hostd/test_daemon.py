"""hostd's link (hostd/daemon.py) against a raw-upgrade test edge: the ``hello`` names the
instances running here (docs/protocol.md 7), instances outlive a dropped link, refusals end
the daemon for good."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio

from devyard.core import ControlChannel, Session, UpgradeRequest
from devyard.hostd.daemon import HostdConfig, PermanentLinkError, serve_hostd
from tests.core.linkpeer import open_link_peer, register


def _config(tmp_path: Path, port: int) -> HostdConfig:
    return HostdConfig(
        server_url="http://unused.invalid",
        token="dyh_test",
        region="eu",
        data_dir=tmp_path,
        link=f"tcp://127.0.0.1:{port}",
        backoff_base=0.05,
    )


async def _wait_event(control: ControlChannel, phase: str) -> dict[str, Any]:
    while True:
        message = await control.receive()
        if message.get("type") == "instance_event" and message.get("phase") == phase:
            return message


async def test_hello_names_the_running_instances_and_they_survive_a_dropped_link(
    tmp_path: Path,
) -> None:
    shutdown = trio.Event()
    seen: list[dict[str, Any]] = []

    async def first_link(session: Session, control: ControlChannel) -> None:
        order = {"instance_id": "ins_1", "platform": "ios"}
        await control.send({"type": "instance_start", "order": order})
        seen.append(await _wait_event(control, "ready"))
        # returning closes the session: the link drops, the instance keeps running

    async def second_link(session: Session, control: ControlChannel) -> None:
        await control.send({"type": "instance_stop", "instance_id": "ins_1"})  # still ours
        seen.append(await _wait_event(control, "terminated"))
        shutdown.set()
        await session.wait_ended()

    async def handler(number: int, request: UpgradeRequest) -> None:
        then = first_link if number == 0 else second_link
        await register(peer, request, {"type": "registered", "host_id": "hst_1"}, then)

    async with open_link_peer(handler) as peer:
        with trio.fail_after(30):
            await serve_hostd(_config(tmp_path, peer.port), shutdown=shutdown)
    assert [hello["instances"] for hello in peer.hellos] == [[], ["ins_1"]]
    assert [(e["instance_id"], e["phase"]) for e in seen] == [
        ("ins_1", "ready"),
        ("ins_1", "terminated"),
    ]


@pytest.mark.parametrize("status", [401, 403])
async def test_a_refused_token_ends_hostd_for_good(tmp_path: Path, status: int) -> None:
    async def handler(number: int, request: UpgradeRequest) -> None:
        body = {"message": "invalid host token", "reason": "unauthorized"}
        await request.reject(status, json.dumps(body).encode())

    async with open_link_peer(handler) as peer:
        with trio.fail_after(30), pytest.raises(PermanentLinkError, match=f"HTTP {status}"):
            await serve_hostd(_config(tmp_path, peer.port))
    assert peer.connections == 1


async def test_a_permanent_error_in_the_control_loop_ends_hostd_for_good(tmp_path: Path) -> None:
    async def kick(session: Session, control: ControlChannel) -> None:
        await control.send(
            {"type": "error", "code": "host-deleted", "message": "gone", "permanent": True}
        )
        await session.wait_ended()

    async def handler(number: int, request: UpgradeRequest) -> None:
        await register(peer, request, {"type": "registered", "host_id": "hst_1"}, kick)

    async with open_link_peer(handler) as peer:
        with trio.fail_after(30), pytest.raises(PermanentLinkError, match="host-deleted: gone"):
            await serve_hostd(_config(tmp_path, peer.port))
    assert peer.connections == 1
