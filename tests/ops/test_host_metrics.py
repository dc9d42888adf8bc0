"""The host daemon's /metrics (hostd --metrics-listen) against a test edge: the instances
gauge follows an instance's life; the exposition parses with prometheus-client."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import trio

from devyard.core import ControlChannel, Session, UpgradeRequest
from devyard.hostd.daemon import HostdConfig, serve_hostd
from tests.core.linkpeer import open_link_peer, register
from tests.ports import free_port

from ._prom import scrape, value


async def _wait_event(control: ControlChannel, phase: str) -> dict[str, Any]:
    while True:
        message = await control.receive()
        if message.get("type") == "instance_event" and message.get("phase") == phase:
            return message


async def test_host_metrics_count_the_instances_running_here(tmp_path: Path) -> None:
    shutdown = trio.Event()
    metrics_port = free_port()
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    seen: list[float] = []

    async def link(session: Session, control: ControlChannel) -> None:
        seen.append(value(await scrape(url), "devyard_host_instances"))
        order = {"instance_id": "ins_1", "platform": "ios"}
        await control.send({"type": "instance_start", "order": order})
        await _wait_event(control, "ready")
        samples = await scrape(url)
        seen.append(value(samples, "devyard_host_instances"))
        assert value(samples, "devyard_host_capacity") == 2
        assert value(samples, "devyard_host_build_info") == 1
        await control.send({"type": "instance_stop", "instance_id": "ins_1"})
        await _wait_event(control, "terminated")
        seen.append(value(await scrape(url), "devyard_host_instances"))
        shutdown.set()
        await session.wait_ended()

    async def handler(number: int, request: UpgradeRequest) -> None:
        await register(peer, request, {"type": "registered", "host_id": "hst_1"}, link)

    config = HostdConfig(
        server_url="http://unused.invalid",
        token="dyh_test",
        region="eu",
        data_dir=tmp_path,
        capacity=2,
        backoff_base=0.05,
        metrics_listen=("127.0.0.1", metrics_port),
    )
    async with open_link_peer(handler) as peer:
        config = attrs.evolve(config, link=f"tcp://127.0.0.1:{peer.port}")
        with trio.fail_after(30):
            await serve_hostd(config, shutdown=shutdown)
    assert seen == [0, 1, 0]
