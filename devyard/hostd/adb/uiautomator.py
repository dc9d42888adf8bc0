"""`uiautomator dump`: the element tree of the screen, as the real command writes it.

``uiautomator dump [--compressed] [--windows] [FILE]`` writes the hierarchy XML
(`uitree.to_uiautomator_xml`) to FILE, ``/sdcard/window_dump.xml`` by default, and prints
``UI hierchary dumped to: FILE`` (the real tool's spelling, which scripts grep for). FILE
``/dev/tty`` (or ``/dev/stdout``) prints the XML itself first, which is what
``adb exec-out uiautomator dump /dev/tty`` readers expect. ``--compressed`` is accepted and
changes nothing (the virtual screen has no layout-only views to drop); ``--windows`` likewise
(one window).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from ..drivers.uitree import UiTreeDevice, to_uiautomator_xml
from .interpreter import CommandIO, Interpreter, command, device_path

__all__ = ["DEFAULT_DUMP"]

DEFAULT_DUMP: Final = "/sdcard/window_dump.xml"
_TTY: Final = frozenset({"/dev/tty", "/dev/stdout"})
_USAGE: Final = (
    "Usage: uiautomator <subcommand> [options]\n\n"
    "Available subcommands:\n\n"
    "dump: creates an XML dump of current UI hierarchy\n"
    "    dump [--verbose][--compressed][--windows][file]\n"
)


@command("uiautomator")
async def _uiautomator(sh: Interpreter, argv: Sequence[str], io: CommandIO) -> int:
    args = list(argv[1:])
    if not args or args[0] != "dump":
        await io.err(_USAGE)
        return 1
    paths = [a for a in args[1:] if not a.startswith("--")]
    unknown = [a for a in args[1:] if a.startswith("--") and a not in _OPTIONS]
    if unknown or len(paths) > 1:
        await io.err(_USAGE)
        return 1
    device = sh.device
    if not isinstance(device, UiTreeDevice):
        await io.err("ERROR: could not get idle state.\n")
        return 1
    target = paths[0] if paths else DEFAULT_DUMP
    info = device.describe()
    xml = to_uiautomator_xml(await device.ui_tree(), rotation=int(info.rotation) // 90)
    if target in _TTY:
        await io.out(xml)
    else:
        await device.push(device_path(target), xml.encode())
    await io.out(f"UI hierchary dumped to: {target}\n")
    return 0


_OPTIONS: Final = frozenset({"--compressed", "--windows", "--verbose"})
