"""The real ``adb`` client, run as a subprocess with a deadline, and its server's smart socket.

`AdbCli.run` runs ``adb [-P PORT] [-s SERIAL] ARGS...`` with `trio.run_process` under a
timeout (the process is killed when it runs out) and returns status and output; `shell`
passes one pre-quoted command line, so what the device's ``sh`` sees is exactly what we built.

`AdbCli.open_service` opens a device service (``tcp:PORT``, ``localabstract:NAME``) as a
stream through the adb server, the way ``adb forward`` does internally: connect to the server,
``host:transport:SERIAL``, then the service. The server answers ``OKAY`` only once the device
accepted the stream and ``FAIL closed`` when it refused it, so a closed device port is a
refusal at once, and no forward is left behind to clean up.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Final

import attrs
import trio

from .._errors import DeviceError, PortClosedError

__all__ = ["AdbCli", "AdbError", "AdbResult", "quote_all"]

DEFAULT_SERVER_PORT: Final = 5037
_SMART_SOCKET_TIMEOUT: Final = 10.0


class AdbError(DeviceError):
    """An adb command failed or ran out of time."""


@attrs.frozen
class AdbResult:
    argv: tuple[str, ...]
    status: int
    stdout: bytes = attrs.field(repr=lambda b: f"<{len(b)} bytes>")
    stderr: bytes

    @property
    def out(self) -> str:
        return self.stdout.decode(errors="replace")

    @property
    def err(self) -> str:
        return self.stderr.decode(errors="replace")

    @property
    def text(self) -> str:
        """stdout and stderr together (adb prints device errors on either)."""
        return (self.out + self.err).strip()


@attrs.frozen
class AdbCli:
    """One adb client configuration: binary, server port, environment, default timeout."""

    path: str
    server_port: int | None = None
    env: dict[str, str] = attrs.Factory(dict)  # adb's whole environment (EmulatorConfig.tool_env)
    timeout: float = 30.0

    def argv(self, *args: str, serial: str | None = None) -> list[str]:
        port = ["-P", str(self.server_port)] if self.server_port is not None else []
        target = ["-s", serial] if serial else []
        return [self.path, *port, *target, *args]

    async def run(
        self,
        *args: str,
        serial: str | None = None,
        stdin: bytes = b"",
        time_limit: float | None = None,
        check: bool = True,
    ) -> AdbResult:
        argv = self.argv(*args, serial=serial)
        limit = self.timeout if time_limit is None else time_limit
        with trio.move_on_after(limit) as scope:
            proc = await trio.run_process(
                argv, stdin=stdin, capture_stdout=True, capture_stderr=True,
                env=self.env, check=False,
            )  # fmt: skip
        if scope.cancelled_caught:
            raise AdbError(f"`adb {' '.join(args)}` did not finish within {limit:g} s")
        result = AdbResult(tuple(argv), proc.returncode, proc.stdout, proc.stderr)
        if check and result.status != 0:
            raise AdbError(f"`adb {' '.join(args)}` exited {result.status}: {result.text}")
        return result

    async def shell(
        self, serial: str, command: str, *, time_limit: float | None = None, check: bool = True
    ) -> AdbResult:
        """``adb shell COMMAND`` with COMMAND already quoted for the device's shell."""
        return await self.run("shell", command, serial=serial, time_limit=time_limit, check=check)

    # -- the adb server's smart socket ------------------------------------------------------
    @property
    def effective_server_port(self) -> int:
        if self.server_port is not None:
            return self.server_port
        value = self.env.get("ANDROID_ADB_SERVER_PORT", "")
        return int(value) if value.isdigit() else DEFAULT_SERVER_PORT

    async def open_service(self, serial: str, service: str) -> trio.SocketStream:
        """A stream to ``service`` on device ``serial`` through the adb server;
        `PortClosedError` when the device refuses it."""
        port = self.effective_server_port
        with trio.move_on_after(_SMART_SOCKET_TIMEOUT) as scope:
            try:
                stream = await trio.open_tcp_stream("127.0.0.1", port)
            except OSError as exc:
                raise AdbError(f"the adb server on port {port} is not reachable: {exc}") from exc
            try:
                await _request(stream, f"host:transport:{serial}")
                try:
                    await _request(stream, service)
                except AdbError as exc:
                    raise PortClosedError(f"{service} on {serial}: {exc}") from None
            except BaseException:
                await trio.aclose_forcefully(stream)
                raise
            return stream
        assert scope.cancelled_caught
        raise AdbError(f"the adb server did not open {service} within {_SMART_SOCKET_TIMEOUT} s")


async def _request(stream: trio.SocketStream, request: str) -> None:
    payload = request.encode()
    await stream.send_all(b"%04x" % len(payload) + payload)
    status = await _read_exactly(stream, 4)
    if status == b"OKAY":
        return
    if status != b"FAIL":
        raise AdbError(f"unexpected adb server answer {status!r} to {request!r}")
    length = int(await _read_exactly(stream, 4), 16)
    raise AdbError((await _read_exactly(stream, length)).decode(errors="replace"))


async def _read_exactly(stream: trio.SocketStream, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = await stream.receive_some(size - len(data))
        if not chunk:
            raise AdbError("the adb server closed the connection")
        data += chunk
    return bytes(data)


def quote_all(words: Sequence[str]) -> str:
    """A device shell command line from words."""
    return " ".join(shlex.quote(word) for word in words)
