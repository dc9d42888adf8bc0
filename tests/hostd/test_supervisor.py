"""The supervisor's seams (hostd/supervisor.py): a driver per platform, one instance's failure
contained to that instance, and the link reached only through an egress dialer."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import attrs
import pytest
import trio
import trio.testing

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


async def test_a_repeated_order_starts_nothing_and_a_ready_instance_says_ready_again(
    tmp_path: Path,
) -> None:
    """A server replica that dies as the host's ``ready`` reaches it loses it; the order
    repeated (the host's new registration, an adopter) gets it again, once the device is up."""
    opened: list[str] = []
    go = trio.Event()

    @asynccontextmanager
    async def open_slowly(spec: DeviceSpec) -> AsyncIterator[DeviceDriver]:
        opened.append(spec.instance_id)
        await go.wait()
        async with open_virtual_device(spec) as device:
            yield device

    async with _supervisor(tmp_path, {Platform.IOS: open_slowly}) as supervisor:
        order = {"instance_id": "ins_a", "platform": "ios"}
        supervisor.start(order)
        await trio.testing.wait_all_tasks_blocked()
        supervisor.start(order)  # still starting: nothing to say yet
        await trio.testing.wait_all_tasks_blocked()
        assert supervisor.outbox_peek() is None
        go.set()
        ready = await _next_event(supervisor)
        assert (ready["instance_id"], ready["phase"]) == ("ins_a", "ready")
        assert supervisor.outbox_peek() is None  # one ready: the repeat while starting added none
        supervisor.start(order)
        again = await _next_event(supervisor)
        assert (again["instance_id"], again["phase"]) == ("ins_a", "ready")
        assert opened == ["ins_a"]  # started once
        assert supervisor.running() == ["ins_a"]


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


class GuestVirtualDevice(VirtualDevice):
    """A test-only device with a network stack of its own, as an emulator's guest has."""

    guest_network = True


@attrs.define
class Recorded:
    specs: list[DeviceSpec] = attrs.Factory(list)
    answers: list[str] = attrs.Factory(list)  # the proxy's status lines while the device opened
    dials: list[dict[str, Any]] = attrs.Factory(list)


async def _ask_proxy(url: str, *, with_credentials: bool) -> str:
    """A CONNECT to a selector's destination through the proxy in *url*: its status line."""
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    head = "CONNECT a.corp:443 HTTP/1.1\r\nHost: a.corp:443\r\n"
    if with_credentials:
        pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
        head += f"Proxy-Authorization: Basic {base64.b64encode(pair.encode()).decode()}\r\n"
    stream = await trio.open_tcp_stream(parts.hostname, parts.port)
    async with stream:
        await stream.send_all((head + "\r\n").encode())
        answer = b""
        while b"\r\n" not in answer:
            chunk = await stream.receive_some(4096)
            if not chunk:
                break
            answer += chunk
    return answer.split(b"\r\n", 1)[0].decode()


def _recording_driver(recorded: Recorded, device_class: type[VirtualDevice]) -> DriverOpener:
    """A test-only driver that records its spec and, while it opens, uses the proxy it names
    (as the emulator does when it launches): the proxy must already serve."""

    @asynccontextmanager
    async def open_recording_device(spec: DeviceSpec) -> AsyncIterator[DeviceDriver]:
        recorded.specs.append(spec)
        if spec.http_proxy is not None:
            for with_credentials in (False, True):
                answer = await _ask_proxy(spec.http_proxy, with_credentials=with_credentials)
                recorded.answers.append(answer)
        async with device_class(spec) as device:
            yield device

    return open_recording_device


def _tunnel_link(recorded: Recorded) -> Any:
    async def egress(instance_id: str, fields: dict[str, Any]) -> trio.abc.Stream:
        await trio.lowlevel.checkpoint()
        recorded.dials.append({"instance_id": instance_id, **fields})
        ours, _theirs = trio.testing.memory_stream_pair()
        return ours

    return egress


_TUNNEL = {"name": "corp", "selector_version": 3, "selectors": ["a.corp:443"]}


@pytest.mark.parametrize("guest", [False, True], ids=["virtual", "guest-network"])
async def test_a_tunnel_attached_device_opens_with_its_proxy_already_serving(
    tmp_path: Path, guest: bool
) -> None:
    recorded = Recorded()
    device_class = GuestVirtualDevice if guest else VirtualDevice
    drivers = {Platform.ANDROID: _recording_driver(recorded, device_class)}
    async with trio.open_nursery() as nursery:
        supervisor = Supervisor(
            nursery, tmp_path, capacity=4, drivers=drivers, egress=_tunnel_link(recorded)
        )
        supervisor.start({"instance_id": "ins_p", "platform": "android", "tunnel": _TUNNEL})
        ready = await _next_event(supervisor)
        assert (ready["instance_id"], ready["phase"]) == ("ins_p", "ready"), ready
        (spec,) = recorded.specs
        assert spec.http_proxy is not None
        proxy = urlsplit(spec.http_proxy)
        assert proxy.hostname == "127.0.0.1" and (proxy.username or "").startswith("dy-")
        assert proxy.password and proxy.password not in repr(spec)
        # While the device opened: no credentials, 407; its own credentials, through the tunnel.
        assert recorded.answers[0].startswith("HTTP/1.1 407")
        assert recorded.answers[1].startswith("HTTP/1.1 200")
        assert {"instance_id": "ins_p", "dest": "a.corp:443", "selector_version": 3} in (
            recorded.dials
        )
        device = supervisor.device("ins_p")
        assert isinstance(device, VirtualDevice)
        setting = await device.settings_get("global", "http_proxy")
        if guest:  # the host's loopback is not the guest's: the driver was given the proxy
            assert setting is None
        else:  # the virtual device's commands run on the host: today's setting
            assert setting == f"127.0.0.1:{proxy.port}"
        supervisor.stop_all()
        terminated = await _next_event(supervisor)
        assert (terminated["phase"], terminated["error_message"]) == ("terminated", None)
        with pytest.raises(OSError):  # the proxy stopped before the instance was reported
            await trio.open_tcp_stream("127.0.0.1", proxy.port or 0)


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
