"""The command interpreter behind shell: and exec:, run against the virtual device directly.

Importing android_commands (for KEYCODES) registers the Android commands, as services.py does.
"""

from __future__ import annotations

import pytest

from devyard.hostd.adb.android_commands import KEYCODES
from devyard.hostd.adb.interpreter import CommandIO, Interpreter
from devyard.hostd.adb.shell_parse import Command, ParseError, Redirect, parse_line
from devyard.hostd.drivers import Key
from devyard.hostd.drivers.virtual import VirtualDevice


class Captured:
    def __init__(self) -> None:
        self.out = bytearray()
        self.err = bytearray()

    def io(self, stdin: bytes = b"") -> CommandIO:
        async def out(data: bytes) -> None:
            self.out += data

        async def err(data: bytes) -> None:
            self.err += data

        class Stdin:
            def __init__(self) -> None:
                self.data = stdin

            async def read(self) -> bytes:
                data, self.data = self.data, b""
                return data

        return CommandIO(out, err, Stdin())


async def run(device: VirtualDevice, line: str, stdin: bytes = b"") -> tuple[int, str, str]:
    captured = Captured()
    status = await Interpreter(device).run_line(line, captured.io(stdin))
    return status, captured.out.decode(), captured.err.decode()


def test_parse_what_adb_sends() -> None:
    assert parse_line("rm '/data/local/tmp/a b.apk' </dev/null") == [
        ("", [Command(("rm", "/data/local/tmp/a b.apk"), (Redirect(0, "/dev/null"),))])
    ]
    assert parse_line('pm list packages | grep -v x; echo "a\\"b" c\\ d') == [
        ("", [Command(("pm", "list", "packages")), Command(("grep", "-v", "x"))]),
        (";", [Command(("echo", 'a"b', "c d"))]),
    ]
    assert parse_line("ls 2>/dev/null >>out 2>&1") == [
        ("", [Command(("ls",), (Redirect(2, "/dev/null"), Redirect(1, "out", True),
                                 Redirect(2, "&1")))]),
    ]  # fmt: skip
    assert parse_line('echo "2">x') == [("", [Command(("echo", "2"), (Redirect(1, "x"),))])]
    assert parse_line("echo $HOME") == [("", [Command(("echo", "$HOME"))])]
    assert parse_line("  ;  ") == []


@pytest.mark.parametrize(
    "line", ["echo 'open", "sleep 1 &", "echo $(id)", "echo `id`", "| grep x", "ls >", "a && && b"]
)
def test_parse_refuses_what_we_do_not_run(line: str) -> None:
    with pytest.raises(ParseError):
        parse_line(line)


def test_keycodes_by_name_and_number() -> None:
    assert KEYCODES["KEYCODE_HOME"] is Key.HOME
    assert KEYCODES["3"] is Key.HOME
    assert KEYCODES["HOME"] is Key.HOME
    assert KEYCODES["KEYCODE_3"] == "3"  # the digit key types text
    assert KEYCODES["29"] == "a"
    assert KEYCODES["KEYCODE_SPACE"] == " "


async def test_sequences_pipes_and_status(device: VirtualDevice) -> None:
    assert await run(device, "echo a; false && echo no || echo yes") == (0, "a\nyes\n", "")
    assert await run(device, "true && exit 7") == (7, "", "")
    assert await run(device, "nosuch arg") == (127, "", "sh: nosuch: not found\n")
    status, out, _ = await run(device, "pm list packages | grep -c settings")
    assert (status, out) == (0, "1\n")
    assert (await run(device, "echo abc | grep -q zzz"))[0] == 1
    assert await run(device, "sh -c 'echo inner'") == (0, "inner\n", "")
    assert (await run(device, "echo $(id)"))[0] == 2


async def test_redirections_use_device_files(device: VirtualDevice) -> None:
    assert await run(device, "echo one > /sdcard/r.txt; echo two >> /sdcard/r.txt") == (0, "", "")
    assert await device.pull("/sdcard/r.txt") == b"one\ntwo\n"
    assert await run(device, "cat < /sdcard/r.txt") == (0, "one\ntwo\n", "")
    assert await run(device, "ls /nope 2>/dev/null") == (1, "", "")
    status, out, err = await run(device, "ls /nope 2>&1")
    assert (status, err) == (1, "")
    assert "No such file" in out
    assert await run(device, "cat", stdin=b"piped") == (0, "piped", "")


async def test_files(device: VirtualDevice) -> None:
    assert await run(device, "mkdir /sdcard/d && touch /sdcard/d/f && ls /sdcard/d") == (
        0, "f\n", ""
    )  # fmt: skip
    status, _, err = await run(device, "mkdir /sdcard/d")
    assert (status, err) == (1, "mkdir: '/sdcard/d': File exists\n")
    assert (await run(device, "rm /sdcard/d"))[0] == 1  # a directory needs -r
    assert await run(device, "rm -rf /sdcard/d /sdcard/never") == (0, "", "")
    assert (await run(device, "ls -l /sdcard"))[1].startswith("d")


async def test_android_commands(device: VirtualDevice) -> None:
    info = device.describe()
    assert await run(device, "wm size") == (0, f"Physical size: {info.width}x{info.height}\n", "")
    props = device.properties()
    assert await run(device, "getprop ro.build.id") == (0, props["ro.build.id"] + "\n", "")
    assert (await run(device, "getprop"))[1].count("\n") == len(props)
    assert await run(device, "settings get secure nothing_here") == (0, "null\n", "")
    assert (await run(device, "settings frobnicate"))[0] == 1
    assert (await run(device, "input keyevent KEYCODE_HOME"))[0] == 0
    assert (await run(device, "input keyevent KEYCODE_NOPE"))[0] == 1
    assert (await run(device, "input tap -5 x"))[0] == 1
    assert (await run(device, "cmd nosuchservice"))[0] == 20
    status, out, _ = await run(device, "pm uninstall com.not.installed")
    assert (status, out) == (1, "Failure [DELETE_FAILED_INTERNAL_ERROR]\n")
    status, out, _ = await run(device, "pm install /sdcard/missing.apk")
    assert status == 1
    assert out.startswith("Failure [")
    png = (await run(device, "screencap -p /sdcard/s.png"))[0]
    assert png == 0
    assert (await device.pull("/sdcard/s.png")).startswith(b"\x89PNG")
