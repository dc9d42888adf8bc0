"""The command services: `shell:` (v1, raw bytes), `shell,v2,...:` (the shell protocol with
exit status), `exec:` (raw, stdout and stderr merged) and `abb_exec:` (NUL-separated
arguments of `cmd`, raw). All run the interpreter; none allocates a real pty.

An empty command is an interactive shell: lines from standard input run one by one. With `pty`
we echo the input and print a prompt, as a terminal would; with `raw` (what adb asks for when
its standard input is not a terminal) we do neither.

Shell v2 theory: one task reads the host's packets and passes STDIN data through a channel of
size 1, so a command that does not read stdin holds back one packet, not the connection. The
host closing the stream (Ctrl-C) cancels the command. After the command, EXIT carries its
status and we close.
"""

from __future__ import annotations

from collections.abc import Sequence

import trio

from ._errors import RemoteProtocolError
from .interpreter import CommandIO, Interpreter
from .shell_protocol import ShellId, ShellPacketDecoder, encode_exit, encode_shell_packet
from .stream import AdbStream

__all__ = ["serve_abb_exec", "serve_exec", "serve_shell"]

_PROMPT = b"devyard:/ $ "


class _StreamStdin:
    """Standard input read straight from the ADB stream (v1 shell, exec, abb_exec)."""

    def __init__(self, stream: AdbStream) -> None:
        self._stream = stream

    async def read(self) -> bytes:
        return await self._stream.receive_some()


class _ChannelStdin:
    """Standard input fed by the shell v2 packet reader."""

    def __init__(self, receive: trio.MemoryReceiveChannel[bytes]) -> None:
        self._receive = receive

    async def read(self) -> bytes:
        try:
            return await self._receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            return b""


def _raw_io(stream: AdbStream) -> CommandIO:
    return CommandIO(stdout=stream.send_all, stderr=stream.send_all, stdin=_StreamStdin(stream))


async def serve_exec(stream: AdbStream, sh: Interpreter, command: str) -> None:
    stream.accept()
    await sh.run_line(command, _raw_io(stream))


async def serve_abb_exec(stream: AdbStream, sh: Interpreter, args: Sequence[str]) -> None:
    stream.accept()
    await sh.run_argv(["cmd", *args], _raw_io(stream))


async def serve_shell(
    stream: AdbStream, sh: Interpreter, command: str, options: Sequence[str]
) -> None:
    stream.accept()
    pty = "pty" in options or ("raw" not in options and not command)
    if "v2" not in options:
        io = _raw_io(stream)
        if pty:
            io = _terminal(io)
        if command:
            await sh.run_line(command, io)
        else:
            await _interactive(sh, io, pty)
        return
    await _shell_v2(stream, sh, command, pty)


def _terminal(io: CommandIO) -> CommandIO:
    """Output as a pty gives it: newlines become CR LF (binary output suffers, as on a device)."""

    async def stdout(data: bytes) -> None:
        await io.stdout(data.replace(b"\n", b"\r\n"))

    async def stderr(data: bytes) -> None:
        await io.stderr(data.replace(b"\n", b"\r\n"))

    return CommandIO(stdout, stderr, io.stdin)


async def _shell_v2(stream: AdbStream, sh: Interpreter, command: str, pty: bool) -> None:
    send_stdin, receive_stdin = trio.open_memory_channel[bytes](1)

    async def stdout(data: bytes) -> None:
        if data:
            await stream.send_all(encode_shell_packet(ShellId.STDOUT, data))

    async def stderr(data: bytes) -> None:
        if data:
            await stream.send_all(encode_shell_packet(ShellId.STDERR, data))

    async def read_host(cancel_scope: trio.CancelScope) -> None:
        decoder = ShellPacketDecoder()
        stdin_open = True
        try:
            while data := await stream.receive_some():
                for kind, payload in decoder.feed(data):
                    if kind is ShellId.STDIN and stdin_open:
                        await send_stdin.send(payload)
                    elif kind is ShellId.CLOSE_STDIN and stdin_open:
                        stdin_open = False
                        await send_stdin.aclose()
                    elif kind not in (
                        ShellId.STDIN,
                        ShellId.CLOSE_STDIN,
                        ShellId.WINDOW_SIZE_CHANGE,
                    ):
                        raise RemoteProtocolError(f"shell packet {kind.name} from the host")
        finally:
            await send_stdin.aclose()
        cancel_scope.cancel()  # the host closed the stream: stop the command

    io = CommandIO(stdout=stdout, stderr=stderr, stdin=_ChannelStdin(receive_stdin))
    if pty:
        io = _terminal(io)
    status = None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(read_host, nursery.cancel_scope)
        status = await sh.run_line(command, io) if command else await _interactive(sh, io, pty)
        nursery.cancel_scope.cancel()
    if status is not None:
        await stream.send_all(encode_exit(status))


async def _interactive(sh: Interpreter, io: CommandIO, pty: bool) -> int:
    """Run lines from stdin until it ends or `exit`; returns the last status."""
    status = 0
    pending = b""
    if pty:
        await io.stdout(_PROMPT)
    while chunk := await io.stdin.read():
        if pty:
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            await io.stdout(chunk)  # the terminal's echo
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            text = line.decode("utf-8", "replace").strip()
            if text in ("exit", "logout"):
                return status
            if text:
                status = await sh.run_line(text, io)
            if pty:
                await io.stdout(_PROMPT)
    if pending.strip():
        status = await sh.run_line(pending.decode("utf-8", "replace"), io)
    return status
