"""The emulator gets its instance's egress proxy, with the credentials, on its command line.

A real emulator cannot run on this machine (no KVM, no SDK): this checks the flag the launch
passes, built from a real proxy's endpoint (docs/tunnels.md "Egress": what is and is not
enforced for an emulator's guest).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import trio

from devyard.core.selectors import parse_selectors
from devyard.hostd.drivers import DeviceSpec, Platform
from devyard.hostd.drivers.emulator import EmulatorConfig, EmulatorDevice, emulator_argv
from devyard.hostd.drivers.virtual import VirtualDevice
from devyard.hostd.egress import EgressProxy
from devyard.hostd.netdial import DeviceNetwork, assign, network_of
from devyard.hostd.netpolicy import NetPolicy, parse_networks


async def test_the_emulator_is_started_with_its_own_proxy_and_credentials(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    tool = tmp_path / "emulator"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    config = EmulatorConfig(emulator_path=str(tool))
    proxy = EgressProxy("android_e_1", parse_selectors(["db.corp:5432"]), None)
    port = await nursery.start(proxy.serve)
    argv = emulator_argv(config, "pixel_8", 5560, http_proxy=proxy.endpoint.url)
    flag = argv.index("-http-proxy")
    url = urlsplit(argv[flag + 1])
    assert (url.scheme, url.hostname, url.port) == ("http", "127.0.0.1", port)
    assert (url.username, url.password) == (proxy.credentials.username, proxy.credentials.password)
    assert "-http-proxy" not in emulator_argv(config, "pixel_8", 5560)  # no tunnel: no flag
    assert proxy.credentials.password not in repr(proxy.endpoint)  # never in a log line


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
