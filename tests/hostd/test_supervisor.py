"""The supervisor's seams (hostd/supervisor.py): a driver per platform, one instance's failure
contained to that instance, and the link reached only through an egress dialer."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from devyard.hostd.daemon import HostdConfig
from devyard.hostd.drivers import DeviceDriver, DeviceSpec, DriverOpener, Platform
from devyard.hostd.drivers.virtual import VirtualDevice, open_virtual_device
from devyard.hostd.supervisor import LinkDown, Supervisor


class BuggyDriverError(Exception):
    """What a driver with a bug raises (not a DeviceError)."""


@asynccontextmanager
async def open_buggy_device(spec: DeviceSpec) -> AsyncIterator[DeviceDriver]:
    """A test-only driver whose start fails with an unexpected exception."""
    await trio.lowlevel.checkpoint()
    if spec.instance_id:
        raise BuggyDriverError(f"no device for {spec.instance_id}")
    yield VirtualDevice(spec)  # never reached: every order has an id


async def _no_link(instance_id: str, fields: dict[str, Any]) -> trio.abc.Stream:
    await trio.lowlevel.checkpoint()
    raise LinkDown("no link in this test")


def _events(supervisor: Supervisor) -> list[dict[str, Any]]:
    events = []
    while (message := supervisor.outbox_peek()) is not None:
        events.append(message)
        supervisor.outbox_pop()
    return events


async def _next_event(supervisor: Supervisor) -> dict[str, Any]:
    with trio.fail_after(30):
        await supervisor.wait_outbox()
    message = supervisor.outbox_peek()
    assert message is not None
    supervisor.outbox_pop()
    return message


@asynccontextmanager
async def _supervisor(
    tmp_path: Path, drivers: Mapping[Platform, DriverOpener]
) -> AsyncIterator[Supervisor]:
    async with trio.open_nursery() as nursery:
        supervisor = Supervisor(nursery, tmp_path, capacity=4, drivers=drivers, egress=_no_link)
        yield supervisor
        supervisor.stop_all()
        with trio.fail_after(30):
            while supervisor.running():
                await supervisor.wait_outbox()
                _events(supervisor)


async def test_a_driver_bug_ends_that_instance_only(tmp_path: Path) -> None:
    drivers = {Platform.IOS: open_virtual_device, Platform.ANDROID: open_buggy_device}
    async with _supervisor(tmp_path, drivers) as supervisor:
        supervisor.start({"instance_id": "ins_ok", "platform": "ios"})
        ready = await _next_event(supervisor)
        assert (ready["instance_id"], ready["phase"]) == ("ins_ok", "ready")

        supervisor.start({"instance_id": "ins_bug", "platform": "android"})
        ended = await _next_event(supervisor)
        assert (ended["instance_id"], ended["phase"]) == ("ins_bug", "terminated")
        assert "BuggyDriverError: no device for ins_bug" in ended["error_message"]

        assert supervisor.running() == ["ins_ok"], "the other instance keeps running"
        device = supervisor.device("ins_ok")
        assert device is not None
        assert device.describe().platform == Platform.IOS  # and still answers

        supervisor.start({"instance_id": "ins_ok2", "platform": "ios"})  # the host still serves
        again = await _next_event(supervisor)
        assert (again["instance_id"], again["phase"]) == ("ins_ok2", "ready")


async def test_an_order_for_a_platform_no_driver_serves_is_refused(tmp_path: Path) -> None:
    async with _supervisor(tmp_path, {Platform.IOS: open_virtual_device}) as supervisor:
        supervisor.start({"instance_id": "ins_a", "platform": "android"})
        ended = await _next_event(supervisor)
        assert (ended["instance_id"], ended["phase"]) == ("ins_a", "terminated")
        assert ended["error_message"] == (
            "this host runs no android devices (platforms served: ios)"
        )
        assert supervisor.running() == []


async def test_a_tunnel_that_cannot_attach_without_a_link_fails_the_instance(
    tmp_path: Path,
) -> None:
    async with _supervisor(tmp_path, {Platform.IOS: open_virtual_device}) as supervisor:
        supervisor.attach_timeout = 1.0  # the dialer's LinkDown is retried until then
        supervisor.start(
            {
                "instance_id": "ins_t",
                "platform": "ios",
                "tunnel": {"name": "corp", "selector_version": 1, "selectors": ["a.corp:443"]},
            }
        )
        ended = await _next_event(supervisor)
        assert (ended["instance_id"], ended["phase"]) == ("ins_t", "terminated")
        assert "did not attach" in ended["error_message"]
        assert "no link in this test" in ended["error_message"]


def test_several_drivers_each_serve_their_platforms() -> None:
    config = HostdConfig(
        server_url="http://edge",
        token="t",
        region="eu",
        data_dir=Path("/nonexistent"),
        drivers=("virtual", "android-emulator"),
    )
    assert config.drivers_by_platform == {
        Platform.ANDROID: "android-emulator",
        Platform.IOS: "virtual",
        Platform.XCODE: "virtual",
        Platform.GRADLE: "virtual",
    }
    only_virtual = HostdConfig(
        server_url="http://edge", token="t", region="eu", data_dir=Path("/nonexistent")
    )
    assert only_virtual.drivers_by_platform[Platform.ANDROID] == "virtual"
