"""The emulator gets its instance's egress proxy, with the credentials, in its environment.

A real emulator cannot run on this machine (no KVM, no SDK): a fake ``emulator`` started by the
real launch path records what it was given, built from a real proxy's endpoint (docs/tunnels.md
"Egress": what is and is not enforced for an emulator's guest).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import pytest
import trio

from devyard.core.selectors import parse_selectors
from devyard.hostd.drivers import DeviceError, DeviceSpec, InvalidSpecError, Platform
from devyard.hostd.drivers.emulator import EmulatorConfig, EmulatorDevice, emulator_env
from devyard.hostd.drivers.emulator.device import open_emulator_device
from devyard.hostd.drivers.virtual import VirtualDevice
from devyard.hostd.egress import EgressProxy
from devyard.hostd.netdial import DeviceNetwork, assign, network_of
from devyard.hostd.netns import NetnsMode
from devyard.hostd.netpolicy import NetPolicy, parse_networks
from tests.hostd.drivers.test_emulator import ADB, kill_server, needs_adb, tool_env
from tests.ports import free_port

FAKE_EMULATOR = """#!/bin/sh
printf '%s' "$*" > "$RECORD.argv"
printf '%s' "$http_proxy" > "$RECORD.proxy"
echo "PANIC: recorded"; exit 1
"""


def fake_sdk(tmp_path: Path) -> Path:
    sdk = tmp_path / "sdk"
    (sdk / "emulator").mkdir(parents=True)
    tool = sdk / "emulator" / "emulator"
    tool.write_text(FAKE_EMULATOR)
    tool.chmod(0o755)
    return sdk


@needs_adb
async def test_the_emulator_is_started_with_its_own_proxy_and_credentials(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    """A fake emulator records what it was started with: the proxy URL with the credentials
    in its ``http_proxy`` variable (which the emulator reads like ``-http-proxy``), nothing of
    them on its command line (``ps`` shows that to every local user)."""
    proxy = EgressProxy("android_e_1", parse_selectors(["db.corp:5432"]), None)
    port = await nursery.start(proxy.serve)
    home = tmp_path / "home"
    home.mkdir()
    record = tmp_path / "record"
    config = EmulatorConfig(
        sdk_root=fake_sdk(tmp_path), adb_path=ADB, adb_server_port=free_port(), avd="pixel_8",
        env=tool_env(home) | {"RECORD": str(record), "http_proxy": "http://operator:3128"},
        base_port=5854, netns=NetnsMode.OFF,  # the proxy as given; in a namespace the URL names
    )  # fmt: skip  # the relay to it instead (tests/hostd/test_emulator_netns.py)
    spec = DeviceSpec(
        Platform.ANDROID, "android_e_1", tmp_path / "sandbox", http_proxy=proxy.endpoint.url
    )
    try:
        with trio.fail_after(20), pytest.raises(DeviceError, match="PANIC: recorded"):
            async with open_emulator_device(spec, config):
                pytest.fail("the fake emulator never boots")
    finally:
        await kill_server(config)
    argv = (tmp_path / "record.argv").read_text()
    url = urlsplit((tmp_path / "record.proxy").read_text())
    assert (url.scheme, url.hostname, url.port) == ("http", "127.0.0.1", port)
    assert (url.username, url.password) == (proxy.credentials.username, proxy.credentials.password)
    assert "-http-proxy" not in argv and proxy.credentials.password not in argv
    assert proxy.credentials.password not in repr(spec)  # never in a log line
    assert proxy.credentials.password not in repr(proxy.endpoint)
    # Without a tunnel the emulator keeps the operator's own environment.
    assert emulator_env(config)["http_proxy"] == "http://operator:3128"


async def test_an_attached_emulator_refuses_a_tunnel_attached_instance(tmp_path: Path) -> None:
    """An emulator that already runs (DEVYARD_EMULATOR_ATTACH) cannot be given its proxy's
    credentials: the instance ends with a clear reason, before any adb command."""
    config = EmulatorConfig(adb_path="/nonexistent/adb", attach="127.0.0.1:9")
    url = "http://dy-0:secret@127.0.0.1:9"
    spec = DeviceSpec(Platform.ANDROID, "android_e_2", tmp_path / "sandbox", http_proxy=url)
    with pytest.raises(InvalidSpecError, match="needs an emulator this host launches"):
        async with open_emulator_device(spec, config):
            pytest.fail("refused before attaching")
    assert not spec.sandbox_dir.exists()


def test_an_operators_http_proxy_argument_cannot_bypass_the_egress_proxy(tmp_path: Path) -> None:
    config = EmulatorConfig(emulator_args=("-http-proxy", "http://elsewhere:3128"))
    with pytest.raises(InvalidSpecError, match="-http-proxy"):
        emulator_env(config, "http://dy-0:secret@127.0.0.1:9")
    assert "http_proxy" not in emulator_env(config)  # no tunnel: the operator's choice


def test_both_drivers_can_hold_a_device_network(tmp_path: Path) -> None:
    """The supervisor keeps each device's `DeviceNetwork` beside it, keyed weakly by the device
    object: a driver class must stay hashable and weak-referenceable (a slotted attrs class
    with eq=True would not be)."""
    for cls in (VirtualDevice, EmulatorDevice):
        assert cls.__hash__ is not None, cls
        assert "__weakref__" in dir(cls), cls
    device = VirtualDevice(DeviceSpec(Platform.ANDROID, "android_n_1", tmp_path / "sb"))
    network = DeviceNetwork(NetPolicy(allow=parse_networks(["10.0.0.0/8"])))
    assert network_of(device) == DeviceNetwork()  # unconfigured: the default policy, no proxy
    assign(device, network)
    assert network_of(device) is network
