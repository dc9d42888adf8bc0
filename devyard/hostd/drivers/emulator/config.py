"""How the ``android-emulator`` driver finds its tools and its device: `EmulatorConfig`.

One config per host daemon, read from the environment by hostd's CLI
(`EmulatorConfig.from_env` in devyard/hostd/commands.py) and handed down through
`HostdConfig.emulator`; tests build one directly. Nothing below the CLI reads the process
environment: `env` is the tools' whole environment. The mode follows from it:

- **attach** when ``attach`` lists adbd addresses (``DEVYARD_EMULATOR_ATTACH=host:port,...``):
  each instance takes the first address no other instance of this process holds, runs
  ``adb connect`` to it and ``adb disconnect`` on close. The device keeps running afterwards.
- **launch** otherwise: ``emulator -avd AVD -no-window -no-audio -port N -read-only`` from the
  SDK, with AVD = ``DEVYARD_EMULATOR_AVD``, else the spec's ``model``; killed on close. With
  ``netns`` (hostd's ``--emulator-netns``, not the environment) it runs in a network
  namespace of its own (isolation.py).

Environment (all optional): ``ANDROID_SDK_ROOT`` (or ``ANDROID_HOME``) for
``emulator/emulator`` and ``platform-tools/adb`` (else both come from ``PATH``),
``DEVYARD_ADB`` / ``DEVYARD_EMULATOR`` for explicit tool paths, ``DEVYARD_ADB_SERVER_PORT``
(this daemon's own adb server, ``adb -P``), ``DEVYARD_EMULATOR_BOOT_TIMEOUT`` (seconds),
``DEVYARD_EMULATOR_ARGS`` (extra emulator arguments, shell-quoted).
"""

from __future__ import annotations

import enum
import shlex
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import attrs

from ...netns import NetnsMode
from ...netpolicy import NetPolicy
from .._errors import InvalidSpecError

__all__ = ["DEFAULT_BASE_PORT", "EmulatorConfig", "Mode"]

DEFAULT_BASE_PORT: Final = 5554  # the emulator's first console port; adbd is console + 1
MAX_EMULATORS: Final = 64  # console ports 5554, 5556, ... 5680 (the emulator's own range)


class Mode(enum.StrEnum):
    LAUNCH = "launch"
    ATTACH = "attach"


def _parse_address(text: str) -> tuple[str, int]:
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidSpecError(f"bad adbd address {text!r} (want HOST:PORT)")
    return host.strip("[]"), int(port)


def _addresses(value: object) -> tuple[tuple[str, int], ...]:
    if isinstance(value, str):
        value = [part for part in value.split(",") if part.strip()]
    if not isinstance(value, list | tuple):
        raise TypeError(f"attach must be a string or a sequence, not {type(value).__name__}")
    return tuple(_parse_address(item) if isinstance(item, str) else item for item in value)


@attrs.frozen
class EmulatorConfig:
    """Tools, mode and timeouts of the ``android-emulator`` driver (see the module doc)."""

    sdk_root: Path | None = None
    adb_path: str | None = None  # default: SDK platform-tools/adb, else `adb` on PATH
    emulator_path: str | None = None  # default: SDK emulator/emulator, else `emulator` on PATH
    adb_server_port: int | None = None  # `adb -P`; None: adb's own default (5037)
    attach: tuple[tuple[str, int], ...] = attrs.field(default=(), converter=_addresses)
    avd: str | None = None
    emulator_args: tuple[str, ...] = ()
    base_port: int = DEFAULT_BASE_PORT
    boot_timeout: float = 300.0  # launch: process start to sys.boot_completed=1
    attach_timeout: float = 60.0  # attach: adb connect to a device that answers
    command_timeout: float = 30.0  # one adb command (shell, forward, connect...)
    transfer_timeout: float = 600.0  # adb install / push / pull
    env: Mapping[str, str] = attrs.field(factory=dict)  # the tools' whole environment
    #: ``--emulator-netns``: each launched emulator in a network namespace of its own,
    #: reaching only its instance's egress proxy (isolation.py, docs/tunnels.md).
    netns: NetnsMode = attrs.field(default=NetnsMode.AUTO, converter=NetnsMode)
    netns_prefix: str = "dyemu-"  # hostd's own (netns.owner_prefix): what its start sweeps
    #: The host's policy (``--allow-network``) for the proxy a tunnel-less emulator gets.
    net_policy: NetPolicy = attrs.field(factory=NetPolicy)

    @property
    def mode(self) -> Mode:
        return Mode.ATTACH if self.attach else Mode.LAUNCH

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> EmulatorConfig:
        sdk = env.get("ANDROID_SDK_ROOT") or env.get("ANDROID_HOME")
        port = env.get("DEVYARD_ADB_SERVER_PORT", "").strip()
        boot = env.get("DEVYARD_EMULATOR_BOOT_TIMEOUT", "").strip()
        try:
            return cls(
                sdk_root=Path(sdk) if sdk else None,
                adb_path=env.get("DEVYARD_ADB") or None,
                emulator_path=env.get("DEVYARD_EMULATOR") or None,
                adb_server_port=int(port) if port else None,
                attach=env.get("DEVYARD_EMULATOR_ATTACH", ""),
                avd=env.get("DEVYARD_EMULATOR_AVD") or None,
                emulator_args=tuple(shlex.split(env.get("DEVYARD_EMULATOR_ARGS", ""))),
                boot_timeout=float(boot) if boot else 300.0,
                env=dict(env),
            )
        except ValueError as exc:
            raise InvalidSpecError(f"android-emulator configuration: {exc}") from None

    def tool_env(self) -> dict[str, str]:
        """The environment adb and the emulator run with."""
        env = dict(self.env)
        if self.sdk_root is not None:
            env.setdefault("ANDROID_SDK_ROOT", str(self.sdk_root))
        if self.adb_server_port is not None:
            # adb takes -P, but the emulator registers with the server named here.
            env["ANDROID_ADB_SERVER_PORT"] = str(self.adb_server_port)
        return env

    def resolve_adb(self) -> str:
        return self._tool(self.adb_path, ("platform-tools", "adb"), "adb")

    def resolve_emulator(self) -> str:
        return self._tool(self.emulator_path, ("emulator", "emulator"), "emulator")

    def _tool(self, explicit: str | None, in_sdk: tuple[str, str], name: str) -> str:
        if explicit:
            return explicit
        if self.sdk_root is not None:
            candidate = self.sdk_root.joinpath(*in_sdk)
            if candidate.is_file():
                return str(candidate)
        path = self.tool_env().get("PATH")
        found = shutil.which(name, path=path)
        if found is None:
            where = f"{self.sdk_root}/{'/'.join(in_sdk)} or " if self.sdk_root else ""
            raise InvalidSpecError(
                f"the android-emulator driver needs `{name}` ({where}PATH); "
                "set ANDROID_SDK_ROOT or DEVYARD_" + name.upper()
            )
        return found
