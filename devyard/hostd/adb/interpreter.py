"""The small `sh` behind `shell:` and `exec:`: running parsed lines, builtins, file commands.

Theory of operation
-------------------
shell_parse.py turns a line into pipelines joined by `;`, `&&` and `||`. Each command's first
word picks a handler: the builtins and file commands here, the Android ones in
android_commands.py. A handler gets the interpreter (and so the device), the argument list and
a `CommandIO`, writes bytes, and returns an exit status. As in `sh`, an unknown command prints
`sh: X: not found` and exits 127.

Pipes run their commands one after the other, each one's output buffered whole into the next
one's input: good enough for `pm list packages | grep x`, and no buffer is unbounded beyond
what one command prints. Redirections read or write device files (`/dev/null` is special).

Files live in the device's own file system (the drivers' push / pull / stat / ls / mkdir /
remove verbs, kept in the instance's sandbox); the current directory is always `/`.
"""

from __future__ import annotations

import contextlib
import posixpath
import re
import stat
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Final, Protocol

import attrs

from ..drivers._errors import DeviceError, DeviceFileError
from ..drivers.base import FileEntry
from .device import AdbDevice
from .shell_parse import Command, ParseError, parse_line

__all__ = [
    "COMMANDS",
    "SPECIAL_FILES",
    "CommandIO",
    "Handler",
    "Interpreter",
    "ParseError",
    "Stdin",
    "command",
    "device_path",
]


class Stdin(Protocol):
    async def read(self) -> bytes:
        """The next chunk of standard input; b"" at its end."""
        ...


class _NoStdin:
    async def read(self) -> bytes:
        return b""


@attrs.define
class CommandIO:
    stdout: Callable[[bytes], Awaitable[None]]
    stderr: Callable[[bytes], Awaitable[None]]
    stdin: Stdin = attrs.field(factory=_NoStdin)

    async def out(self, text: str) -> None:
        await self.stdout(text.encode())

    async def err(self, text: str) -> None:
        await self.stderr(text.encode())


Handler = Callable[["Interpreter", Sequence[str], CommandIO], Awaitable[int]]
COMMANDS: Final[dict[str, Handler]] = {}


def command(*names: str) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        for name in names:
            COMMANDS[name] = fn
        return fn

    return register


class Interpreter:
    """Runs command lines against one device."""

    def __init__(self, device: AdbDevice) -> None:
        self.device = device

    async def run_line(self, line: str, io: CommandIO) -> int:
        try:
            parsed = parse_line(line)
        except ParseError as exc:
            await io.err(f"sh: {exc}\n")
            return 2
        status = 0
        for connector, pipeline in parsed:
            if (connector == "&&" and status != 0) or (connector == "||" and status == 0):
                continue
            status = await self._run_pipeline(pipeline, io)
        return status

    async def _run_pipeline(self, pipeline: Sequence[Command], io: CommandIO) -> int:
        piped: bytes | None = None
        status = 0
        for i, cmd in enumerate(pipeline):
            last = i == len(pipeline) - 1
            captured = bytearray()

            async def capture(data: bytes, captured: bytearray = captured) -> None:
                captured.extend(data)

            stdin: Stdin = _BytesStdin(piped) if piped is not None else io.stdin
            stage = CommandIO(io.stdout if last else capture, io.stderr, stdin)
            status = await self._run_redirected(cmd, stage)
            piped = bytes(captured)
        return status

    async def _run_redirected(self, cmd: Command, io: CommandIO) -> int:
        files: dict[str, bytearray] = {}  # output redirections, written when the command ends
        sinks = {1: io.stdout, 2: io.stderr}
        stdin = io.stdin
        try:
            for redirect in cmd.redirects:
                if redirect.fd == 0:
                    stdin = _BytesStdin(await self._read_input(redirect.target))
                elif redirect.target in ("&1", "&2"):
                    sinks[redirect.fd] = sinks[int(redirect.target[1])]
                elif redirect.target == "/dev/null":
                    sinks[redirect.fd] = _discard
                else:
                    path = device_path(redirect.target)
                    buffer = files.setdefault(path, bytearray())
                    if redirect.append and not buffer:
                        with contextlib.suppress(DeviceFileError):
                            buffer += await self.device.pull(path)

                    async def write(data: bytes, buffer: bytearray = buffer) -> None:
                        buffer.extend(data)

                    sinks[redirect.fd] = write
        except DeviceFileError as exc:
            await io.err(f"sh: {exc.path}: {exc.strerror}\n")
            return 1
        status = await self.run_argv(cmd.argv, CommandIO(sinks[1], sinks[2], stdin))
        for path, data in files.items():
            await self.device.push(path, bytes(data))
        return status

    async def _read_input(self, target: str) -> bytes:
        if target == "/dev/null":
            return b""
        return await self.device.pull(device_path(target))

    async def run_argv(self, argv: Sequence[str], io: CommandIO) -> int:
        if not argv:
            return 0
        handler = COMMANDS.get(argv[0])
        if handler is None:
            await io.err(f"sh: {argv[0]}: not found\n")
            return 127
        try:
            return await handler(self, argv, io)
        except ParseError as exc:
            await io.err(f"{exc}\n")
            return 1
        except DeviceFileError as exc:
            await io.err(f"{argv[0]}: {exc.path}: {exc.strerror}\n")
            return 1
        except DeviceError as exc:
            await io.err(f"{argv[0]}: {exc}\n")
            return 1


async def _discard(data: bytes) -> None:
    pass


class _BytesStdin:
    def __init__(self, data: bytes) -> None:
        self._data = data

    async def read(self) -> bytes:
        data, self._data = self._data, b""
        return data


def device_path(path: str) -> str:
    return posixpath.normpath(posixpath.join("/", path))


def flags_and_args(argv: Sequence[str], known: str) -> tuple[set[str], list[str]]:
    """Split `-rf x y` style arguments; unknown flags raise ParseError."""
    flags: set[str] = set()
    args: list[str] = []
    for arg in argv[1:]:
        if arg.startswith("-") and len(arg) > 1 and not args:
            for flag in arg[1:]:
                if flag not in known:
                    raise ParseError(f"{argv[0]}: unknown option -{flag}")
                flags.add(flag)
        else:
            args.append(arg)
    return flags, args


# ---- builtins ----------------------------------------------------------------------------


@command("true")
async def _true(sh: Interpreter, argv: Sequence[str], io: CommandIO) -> int:
    return 0


@command("false")
async def _false(sh: Interpreter, argv: Sequence[str], io: CommandIO) -> int:
    return 1


@command("exit")
async def _exit(sh: Interpreter, argv: Sequence[str], io: CommandIO) -> int:
    try:
        return int(argv[1]) & 0xFF if len(argv) > 1 else 0
    except ValueError:
        await io.err(f"sh: exit: {argv[1]}: bad number\n")
        return 2


@command("echo")
async def _echo(sh: Interpreter, argv: Sequence[str], io: CommandIO) -> int:
    args = list(argv[1:])
    newline = "\n"
    if args and args[0] == "-n":
        args.pop(0)
        newline = ""
    await io.out(" ".join(args) + newline)
    return 0


@command("sh")
async def _sh(sh: Interpreter, argv: Sequence[str], io: CommandIO) -> int:
    if len(argv) >= 3 and argv[1] == "-c":
        return await sh.run_line(argv[2], io)
    await io.err("sh: only `sh -c COMMAND` is supported\n")
    return 2


@command("id")
async def _id(sh: Interpreter, argv: Sequence[str], io: CommandIO) -> int:
    await io.out("uid=2000(shell) gid=2000(shell) groups=2000(shell) context=u:r:shell:s0\n")
    return 0


@command("whoami")
async def _whoami(sh: Interpreter, argv: Sequence[str], io: CommandIO) -> int:
    await io.out("shell\n")
    return 0


@command("grep")
async def _grep(sh: Interpreter, argv: Sequence[str], io: CommandIO) -> int:
    flags, args = flags_and_args(argv, "viEFqc")
    if not args:
        raise ParseError("usage: grep [-viEFqc] PATTERN [FILE...]")
    pattern = re.escape(args[0]) if "F" in flags else args[0]
    try:
        regex = re.compile(pattern, re.IGNORECASE if "i" in flags else 0)
    except re.error as exc:
        raise ParseError(f"grep: bad pattern: {exc}") from None
    if len(args) > 1:
        data = b"".join([await sh.device.pull(device_path(p)) for p in args[1:]])
    else:
        parts = []
        while chunk := await io.stdin.read():
            parts.append(chunk)
        data = b"".join(parts)
    lines = data.decode("utf-8", "replace").splitlines(keepends=True)
    hits = [line for line in lines if bool(regex.search(line)) != ("v" in flags)]
    if "c" in flags:
        await io.out(f"{len(hits)}\n")
    elif "q" not in flags:
        await io.out("".join(hit if hit.endswith("\n") else hit + "\n" for hit in hits))
    return 0 if hits else 1


# ---- files -------------------------------------------------------------------------------


def _mode_string(entry: FileEntry) -> str:
    return stat.filemode(entry.mode)


def _long_line(entry: FileEntry, name: str) -> str:
    when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(entry.mtime))
    return f"{_mode_string(entry)} 1 shell shell {entry.size:>8} {when} {name}\n"


@command("ls")
async def _ls(sh: Interpreter, argv: Sequence[str], io: CommandIO) -> int:
    flags, paths = flags_and_args(argv, "la1dhRt")
    status = 0
    for path in paths or ["/"]:
        try:
            entry = await sh.device.stat(device_path(path))
            if stat.S_ISDIR(entry.mode) and "d" not in flags:
                listing = sorted(await sh.device.ls(device_path(path)), key=lambda e: e.name)
                if len(paths) > 1:
                    await io.out(f"{path}:\n")
            else:
                listing = [attrs.evolve(entry, name=path)]
        except DeviceFileError as exc:
            await io.err(f"ls: {path}: {exc.strerror}\n")
            status = 1
            continue
        for item in listing:
            if item.name.startswith(".") and "a" not in flags:
                continue
            await io.out(_long_line(item, item.name) if "l" in flags else item.name + "\n")
    return status


@command("cat")
async def _cat(sh: Interpreter, argv: Sequence[str], io: CommandIO) -> int:
    if len(argv) == 1:
        while chunk := await io.stdin.read():
            await io.stdout(chunk)
        return 0
    status = 0
    for path in argv[1:]:
        special = SPECIAL_FILES.get(device_path(path))
        try:
            data = special(sh) if special else await sh.device.pull(device_path(path))
        except DeviceFileError as exc:
            await io.err(f"cat: {path}: {exc.strerror}\n")
            status = 1
            continue
        await io.stdout(data)
    return status


@command("mkdir")
async def _mkdir(sh: Interpreter, argv: Sequence[str], io: CommandIO) -> int:
    flags, paths = flags_and_args(argv, "pm")
    if not paths:
        await io.err("mkdir: Needs 1 argument\n")
        return 1
    status = 0
    for path in paths:
        if "p" not in flags:
            try:
                await sh.device.stat(device_path(path))
            except DeviceFileError:
                pass
            else:
                await io.err(f"mkdir: '{path}': File exists\n")
                status = 1
                continue
        await sh.device.mkdir(device_path(path))
    return status


@command("rm")
async def _rm(sh: Interpreter, argv: Sequence[str], io: CommandIO) -> int:
    flags, paths = flags_and_args(argv, "rRfv")
    status = 0
    for path in paths:
        try:
            await sh.device.remove(device_path(path), recursive=bool(flags & {"r", "R"}))
        except DeviceFileError as exc:
            if "f" not in flags:
                await io.err(f"rm: {path}: {exc.strerror}\n")
                status = 1
    return status


@command("touch")
async def _touch(sh: Interpreter, argv: Sequence[str], io: CommandIO) -> int:
    for path in argv[1:]:
        try:
            await sh.device.stat(device_path(path))
        except DeviceFileError:
            await sh.device.push(device_path(path), b"")
    return 0


# Files the interpreter makes up from the device's state rather than reading them.
SpecialFile = Callable[[Interpreter], bytes]
SPECIAL_FILES: Final[dict[str, SpecialFile]] = {}
