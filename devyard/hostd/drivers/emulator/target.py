"""The seam between *how we got the device* and *what we do with it*: `Target`.

`acquire` returns a booted device's adb serial and its adbd address, either by launching an
emulator (`launch`) or by attaching to an adbd that already runs (`attach`). Everything after
that (`device.EmulatorDevice`) speaks to the serial through adb and never asks which it was.
`Target.stop` undoes the acquisition: kills the emulator, or disconnects. It is idempotent,
shielded and bounded.

Which ports and addresses are taken is process-wide state (`_CLAIMED`): one hostd runs several
instances, and two of them must not launch on one console port or attach to one adbd.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final

import attrs
import trio

from .._errors import DeviceError, InvalidSpecError
from ..base import DeviceSpec
from .adb import AdbCli, AdbError
from .config import MAX_EMULATORS, EmulatorConfig, Mode
from .isolation import DNS_INSIDE, Isolation, check_mode_for_attach, use_netns

__all__ = ["Target", "acquire", "attach", "emulator_argv", "emulator_env", "launch"]

_POLL: Final = 0.5
_STOP_GRACE: Final = 15.0
_LOG_TAIL: Final = 2000
_CLAIMED: set[tuple[str, int]] = set()  # ("127.0.0.1", console port) or an attach address


@attrs.define(eq=False)
class Target:
    """A booted device reachable as ``serial``; its adbd listens on ``adbd``."""

    mode: Mode
    serial: str
    adbd: tuple[str, int]
    name: str  # the AVD or the attach address, for describe() and logs
    _stop: Callable[[], Awaitable[None]]
    _stopped: bool = False

    async def stop(self) -> None:
        if self._stopped:
            await trio.lowlevel.checkpoint()
            return
        self._stopped = True
        with trio.CancelScope(shield=True):
            await self._stop()


async def acquire(
    config: EmulatorConfig, adb: AdbCli, spec: DeviceSpec, network: trio.Nursery
) -> Target:
    """Launch or attach as ``config`` says. A spec with an ``http_proxy`` (a tunnel-attached
    instance) needs a launch: only a launched emulator can be given its proxy's credentials.
    ``network`` runs a launched emulator's namespace and relays (isolation.py) until `stop`."""
    if config.mode is Mode.ATTACH:
        if spec.http_proxy is not None:
            raise InvalidSpecError(
                "a tunnel-attached instance needs an emulator this host launches: an attached "
                "one (DEVYARD_EMULATOR_ATTACH) cannot be given its egress proxy's credentials"
            )
        check_mode_for_attach(config)
        return await attach(config, adb)
    avd = config.avd or spec.model
    if not avd:
        raise InvalidSpecError(
            "android-emulator needs an AVD to launch: set DEVYARD_EMULATOR_AVD or the model"
        )
    return await launch(
        config, adb, avd, spec.sandbox_dir / "emulator.log", http_proxy=spec.http_proxy,
        network=network, instance_id=spec.instance_id,
    )  # fmt: skip


# -- attach ---------------------------------------------------------------------------------


async def attach(config: EmulatorConfig, adb: AdbCli) -> Target:
    """``adb connect`` to the first unclaimed address of ``config.attach``."""
    free = [address for address in config.attach if address not in _CLAIMED]
    if not free:
        raise DeviceError(f"every adbd address is in use ({len(config.attach)} configured)")
    address = free[0]
    _CLAIMED.add(address)
    serial = f"{address[0]}:{address[1]}"

    async def stop() -> None:
        try:
            with trio.move_on_after(config.command_timeout):
                await adb.run("disconnect", serial, check=False)
        finally:
            _CLAIMED.discard(address)

    target = Target(Mode.ATTACH, serial, address, serial, stop)
    try:
        with trio.fail_after(config.attach_timeout):
            result = await adb.run("connect", serial, time_limit=config.command_timeout)
            if "connected to" not in result.out:  # "failed to connect to ..." exits 0 too
                raise DeviceError(f"adb connect {serial}: {result.text}")
            await _wait_booted(adb, serial, config)
    except trio.TooSlowError:
        await target.stop()
        raise DeviceError(
            f"{serial} did not come online within {config.attach_timeout:g} s "
            "(unauthorized or offline?)"
        ) from None
    except BaseException:
        await target.stop()
        raise
    return target


# -- launch ---------------------------------------------------------------------------------


def emulator_argv(
    config: EmulatorConfig, avd: str, port: int, *, dns_server: str | None = None
) -> list[str]:
    """The emulator command line for console port ``port`` (adbd listens on port + 1);
    ``dns_server`` before the operator's arguments (a ``-qemu ...`` of theirs stays last)."""
    dns = ["-dns-server", dns_server] if dns_server else []
    return [
        config.resolve_emulator(), "-avd", avd, "-no-window", "-no-audio",
        "-port", str(port), "-read-only", *dns, *config.emulator_args,
    ]  # fmt: skip


def emulator_env(config: EmulatorConfig, http_proxy: str | None = None) -> dict[str, str]:
    """The emulator's environment. ``http_proxy`` (``http://USER:PASSWORD@127.0.0.1:PORT``, the
    instance's egress proxy with its credentials; hostd/egress.py) goes in the ``http_proxy``
    variable, which the emulator reads at start like ``-http-proxy``: it then sends the guest's
    TCP through that proxy, dialing it from the host, so the guest never holds the credentials.
    Not on the command line, which every local user can read in ``ps``; a process's
    environment only its own user can.
    """
    env = config.tool_env()
    if http_proxy is not None:
        if any(arg.startswith("-http-proxy") for arg in config.emulator_args):
            raise InvalidSpecError(
                "DEVYARD_EMULATOR_ARGS sets -http-proxy, which would take a tunnel-attached "
                "instance's traffic past its egress proxy: remove it"
            )
        env["http_proxy"] = http_proxy
    return env


def _ports_free(port: int) -> bool:
    for candidate in (port, port + 1):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", candidate))
            except OSError:
                return False
    return True


def _claim_console_port(config: EmulatorConfig) -> int:
    for n in range(MAX_EMULATORS):
        port = config.base_port + 2 * n
        if ("127.0.0.1", port) not in _CLAIMED and _ports_free(port):
            _CLAIMED.add(("127.0.0.1", port))
            return port
    last = config.base_port + 2 * (MAX_EMULATORS - 1)
    raise DeviceError(f"no free emulator console port (even ports {config.base_port}-{last})")


async def launch(
    config: EmulatorConfig,
    adb: AdbCli,
    avd: str,
    log_path: Path,
    *,
    http_proxy: str | None = None,
    network: trio.Nursery | None = None,
    instance_id: str = "",
) -> Target:
    """Start ``emulator -avd AVD ...`` (through ``http_proxy`` if given: `emulator_env`) and
    wait for ``sys.boot_completed``. With a namespace (`use_netns`; needs ``network``) the
    emulator runs in its own, launched through a relay to its proxy (isolation.py)."""
    isolated = use_netns(config)
    dns = DNS_INSIDE if isolated else None
    argv = emulator_argv(config, avd, 0, dns_server=dns)  # the tool, before claiming a port
    env = emulator_env(config, http_proxy)
    if isolated and network is None:
        raise RuntimeError("launching in a network namespace needs a nursery for its relays")
    port = _claim_console_port(config)
    argv[argv.index("-port") + 1] = str(port)
    serial = f"emulator-{port}"
    isolation: Isolation | None = None
    try:
        if isolated and network is not None:
            isolation = Isolation(config, instance_id, port, http_proxy)
            await network.start(isolation.run)
            argv = isolation.wrap(argv)
            env = emulator_env(config, isolation.proxy_url)
        log_file = await trio.to_thread.run_sync(lambda: log_path.open("wb"))
        try:
            proc = await trio.lowlevel.open_process(
                argv, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                env=env, start_new_session=True,
            )  # fmt: skip
        finally:
            log_file.close()  # the child has its own descriptor
    except BaseException:
        with trio.CancelScope(shield=True):
            if isolation is not None:
                await isolation.aclose()
        _CLAIMED.discard(("127.0.0.1", port))
        raise

    async def stop() -> None:
        try:
            await _stop_emulator(proc, adb, serial, config)
        finally:
            if isolation is not None:
                await isolation.aclose()
            _CLAIMED.discard(("127.0.0.1", port))

    target = Target(Mode.LAUNCH, serial, ("127.0.0.1", port + 1), avd, stop)
    try:
        await _boot(proc, adb, serial, config, log_path, isolation)
    except BaseException:
        await target.stop()
        raise
    return target


async def _boot(  # noqa: PLR0917 - one private call site
    proc: trio.Process,
    adb: AdbCli,
    serial: str,
    config: EmulatorConfig,
    log_path: Path,
    isolation: Isolation | None,
) -> None:
    """Wait for boot, failing early with the emulator's output if it exits first. In a
    namespace the adb server learns of the emulator from us (`Isolation.register`)."""
    exited: int | None = None

    async def watch(cancel: trio.CancelScope) -> None:
        nonlocal exited
        exited = await proc.wait()
        cancel.cancel()

    with trio.move_on_after(config.boot_timeout) as deadline:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch, nursery.cancel_scope)
            if isolation is not None:
                nursery.start_soon(isolation.register, adb)
            await adb.run("wait-for-device", serial=serial, time_limit=config.boot_timeout)
            await _wait_booted(adb, serial, config)
            nursery.cancel_scope.cancel()
    if exited is not None:
        tail = await _tail(log_path)
        raise DeviceError(f"the emulator exited with status {exited} while booting: {tail}")
    if deadline.cancelled_caught:
        raise DeviceError(f"{serial} did not boot within {config.boot_timeout:g} s")


async def _wait_booted(adb: AdbCli, serial: str, config: EmulatorConfig) -> None:
    while True:
        result = await adb.shell(
            serial, "getprop sys.boot_completed", time_limit=config.command_timeout, check=False
        )
        if result.status == 0 and result.out.strip() == "1":
            return
        await trio.sleep(_POLL)


async def _stop_emulator(
    proc: trio.Process, adb: AdbCli, serial: str, config: EmulatorConfig
) -> None:
    """``adb emu kill`` (a clean shutdown through the console), then SIGTERM, then SIGKILL,
    each given `_STOP_GRACE` seconds; a console that refused the kill is not waited for."""
    signals: list[signal.Signals | None] = [signal.SIGTERM, signal.SIGKILL]
    if proc.returncode is None:
        with contextlib.suppress(AdbError):
            killed = await adb.run(
                "emu", "kill", serial=serial, time_limit=config.command_timeout, check=False
            )
            if killed.status == 0 and "OK" in killed.out:
                signals.insert(0, None)
    for signum in signals:
        if signum is not None:
            _signal_group(proc, signum)
        with trio.move_on_after(_STOP_GRACE):
            await proc.wait()
            break
    _signal_group(proc, signal.SIGKILL)  # whatever the emulator left in its session


def _signal_group(proc: trio.Process, signum: signal.Signals) -> None:
    """Signal the emulator's process group: it runs qemu as a child (start_new_session)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signum)


async def _tail(path: Path) -> str:
    def read() -> str:
        try:
            data = path.read_bytes()
        except OSError:
            return "(no output)"
        return data[-_LOG_TAIL:].decode(errors="replace").strip() or "(no output)"

    return await trio.to_thread.run_sync(read)
