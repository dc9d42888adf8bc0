"""The device's network commands: ``curl`` and ``nc``, honouring the device's proxy.

A tunnel-attached instance has ``settings global http_proxy`` set to its egress proxy
(devyard.hostd.egress), as Android's own proxy setting; these commands reach every destination
through it with ``CONNECT``, so ``POST {apiUrl}/shell {"command": "curl http://private:8080/"}``
shows what an app on the device would get. Without a proxy they dial directly.

Every connection is the device's, not the host's: the host's `NetPolicy` decides where a
device may dial (public addresses by default: never the host's loopback services, another
instance's proxy, or private ranges; netdial.py). The credentials for the instance's own proxy
come from the `DeviceNetwork` the supervisor assigned, never from the writable setting, and
are sent only to that proxy; a setting that names another loopback port is a direct dial like
any other, and refused. ``localhost`` / 127.0.0.1 / ``::1`` are the device's own sockets
(`open_port`, what its apps listen on), never the host's, with or without a proxy (Android
does not proxy localhost either).

    curl [-s] [-S] [-f] [-i] [-I] [-X METHOD] [-H 'Name: value']... [-d DATA]
         [-o FILE] [-m SECONDS] URL          http:// and https://; exit codes as curl's
    nc [-w SECONDS] HOST PORT                stdin to the connection, the answer to stdout
"""

from __future__ import annotations

import base64
import ssl
from collections.abc import Sequence
from typing import Final
from urllib.parse import SplitResult, urlsplit

import h11
import trio

from ..drivers._errors import DeviceError
from ..netdial import DeviceNetwork, DialReason, DialRefused, network_of, open_checked
from ..proxy_protocol import Credentials
from .interpreter import CommandIO, Interpreter, ParseError, command, device_path

__all__: list[str] = []

_DEFAULT_TIMEOUT_S: Final = 30.0
_CHUNK: Final = 64 * 1024
# curl's exit codes (man curl, EXIT CODES)
_E_USAGE: Final = 2
_E_URL: Final = 3
_E_PROXY: Final = 5
_E_RESOLVE: Final = 6
_E_CONNECT: Final = 7
_E_HTTP: Final = 22
_E_TIMEOUT: Final = 28
_E_SSL: Final = 35
_E_RECV: Final = 56
# The device's own loopback. The rest of 127.0.0.0/8 is left to the host's policy so that tests
# (and labs) can stand 127.0.0.2+ in for other machines.
_DEVICE_LOCAL: Final = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})


class _NetError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


async def _proxy(sh: Interpreter) -> tuple[str, int] | None:
    value = await sh.device.settings_get("global", "http_proxy")
    if not value or value in (":0", "null"):
        return None
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise _NetError(_E_PROXY, f"bad http_proxy setting {value!r}")
    return host.removeprefix("[").removesuffix("]"), int(port)


async def _read_head(stream: trio.abc.Stream) -> tuple[bytes, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = await stream.receive_some(_CHUNK)
        if not chunk:
            raise _NetError(_E_RECV, "the proxy closed the connection")
        data += chunk
        if len(data) > 65536:
            raise _NetError(_E_RECV, "the proxy's answer is too large")
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


async def _proxy_connect(
    stream: trio.abc.Stream, host: str, port: int, credentials: Credentials | None
) -> None:
    """Ask the proxy on *stream* for a tunnel to host:port (HTTP CONNECT)."""
    authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    auth = ""
    if credentials is not None:
        pair = f"{credentials.username}:{credentials.password}".encode()
        auth = f"Proxy-Authorization: Basic {base64.b64encode(pair).decode()}\r\n"
    request = f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n{auth}\r\n"
    await stream.send_all(request.encode())
    head, rest = await _read_head(stream)
    status_line = head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or parts[1] != "200":
        detail = rest.decode(errors="replace").strip()
        raise _NetError(
            _E_RECV,
            f"Received HTTP code {parts[1] if len(parts) > 1 else '?'} from proxy after "
            f"CONNECT{': ' + detail if detail else ''}",
        )
    if rest:
        raise _NetError(_E_RECV, "the proxy sent data before the tunnel was up")


async def _dial(
    network: DeviceNetwork, host: str, port: int, *, proxy: bool = False
) -> trio.abc.Stream:
    """A connection the device makes: its own proxy as configured by the host, anything else
    only where the host's policy allows (netdial.py), with curl's words for failures."""
    own = network.proxy
    if proxy and own is not None and (host, port) == (own.host, own.port):
        try:
            return await trio.open_tcp_stream(host, port)
        except OSError:
            raise _NetError(_E_CONNECT, f"Failed to connect to proxy {host} port {port}") from None
    try:
        return await open_checked(host, port, network.policy)
    except DialRefused as exc:
        if exc.reason is DialReason.NO_SUCH_HOST:
            what = "proxy" if proxy else "host"
            code = _E_PROXY if proxy else _E_RESOLVE
            raise _NetError(code, f"Could not resolve {what}: {host}") from None
        where = "proxy " if proxy else ""
        message = f"Failed to connect to {where}{host} port {port}: {exc.reason.value}"
        raise _NetError(_E_CONNECT, message) from None


def _device_local(host: str) -> bool:
    return host.lower().rstrip(".") in _DEVICE_LOCAL


async def _connect(sh: Interpreter, host: str, port: int) -> trio.abc.Stream:
    """A TCP connection to host:port, through the device's proxy if it has one. The device's
    own loopback is its own sockets (as Android does not proxy localhost), never the host's."""
    if _device_local(host):
        try:
            return await sh.device.open_port(port)
        except DeviceError:  # PortClosedError, or a port out of range
            message = f"Failed to connect to {host} port {port}: Connection refused"
            raise _NetError(_E_CONNECT, message) from None
    network = network_of(sh.device)
    proxy = await _proxy(sh)
    if proxy is None:
        return await _dial(network, host, port)
    stream = await _dial(network, *proxy, proxy=True)
    own = network.proxy
    credentials = own.credentials if own is not None and proxy == (own.host, own.port) else None
    try:
        await _proxy_connect(stream, host, port, credentials)
    except BaseException:
        await trio.aclose_forcefully(stream)
        raise
    return stream


def _curl_args(argv: Sequence[str]) -> dict[str, object]:
    opts: dict[str, object] = {"headers": [], "silent": False, "show_error": False}
    args = list(argv[1:])
    takes = {"-X": "method", "-H": "header", "-d": "data", "-o": "output", "-m": "max_time",
             "--data": "data", "--request": "method", "--header": "header",
             "--output": "output", "--max-time": "max_time"}  # fmt: skip
    flags = {"-s": "silent", "-S": "show_error", "-f": "fail", "-i": "include", "-I": "head",
             "--silent": "silent", "--fail": "fail", "--include": "include",
             "--head": "head", "-L": "follow"}  # fmt: skip
    while args:
        arg = args.pop(0)
        if arg in takes:
            if not args:
                raise ParseError(f"curl: option {arg}: requires parameter")
            value = args.pop(0)
            if takes[arg] == "header":
                opts["headers"].append(value)  # type: ignore[attr-defined]
            else:
                opts[takes[arg]] = value
        elif arg in flags:
            opts[flags[arg]] = True
        elif arg.startswith("-") and len(arg) > 2 and not arg.startswith("--"):
            args[:0] = [f"-{c}" for c in arg[1:]]  # -sS, -fsS...
        elif arg.startswith("-"):
            raise ParseError(f"curl: option {arg}: is unknown")
        elif "url" in opts:
            raise ParseError("curl: one URL at a time")
        else:
            opts["url"] = arg
    if "url" not in opts:
        raise ParseError("curl: no URL specified")
    return opts


def _request(opts: dict[str, object], url: SplitResult) -> tuple[h11.Connection, bytes]:
    data = opts.get("data")
    default = "HEAD" if opts.get("head") else "POST" if data is not None else "GET"
    method = str(opts.get("method") or default)
    body = str(data).encode() if data is not None else b""
    headers = [("Host", url.netloc), ("User-Agent", "curl/8.5.0 (devyard)"), ("Accept", "*/*")]
    if data is not None:
        headers.append(("Content-Type", "application/x-www-form-urlencoded"))
        headers.append(("Content-Length", str(len(body))))
    for line in opts["headers"]:  # type: ignore[attr-defined]
        name, _, value = str(line).partition(":")
        headers.append((name.strip(), value.strip()))
    headers.append(("Connection", "close"))
    conn = h11.Connection(h11.CLIENT)
    target = (url.path or "/") + (f"?{url.query}" if url.query else "")
    out = conn.send(h11.Request(method=method, target=target, headers=headers))
    if body:
        out += conn.send(h11.Data(data=body))
    out += conn.send(h11.EndOfMessage())
    return conn, out


async def _exchange(
    stream: trio.abc.Stream, conn: h11.Connection, request: bytes
) -> tuple[h11.Response, bytes]:
    await stream.send_all(request)
    response: h11.Response | None = None
    chunks: list[bytes] = []
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(bytes(await stream.receive_some(_CHUNK)))
        elif isinstance(event, h11.Response):
            response = event
        elif isinstance(event, h11.Data):
            chunks.append(bytes(event.data))
        elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
            break
    if response is None:
        raise _NetError(_E_RECV, "Empty reply from server")
    return response, b"".join(chunks)


async def _open(sh: Interpreter, url: SplitResult) -> trio.abc.Stream:
    assert url.hostname is not None
    port = url.port or (443 if url.scheme == "https" else 80)
    stream = await _connect(sh, url.hostname, port)
    if url.scheme == "https":
        stream = trio.SSLStream(stream, ssl.create_default_context(), server_hostname=url.hostname)
        try:
            await stream.do_handshake()
        except BaseException as exc:
            await trio.aclose_forcefully(stream)
            if isinstance(exc, trio.BrokenResourceError | ssl.SSLError):
                raise _NetError(_E_SSL, f"SSL connect error: {exc}") from None
            raise
    return stream


async def _curl_once(sh: Interpreter, opts: dict[str, object], io: CommandIO) -> int:
    url = urlsplit(str(opts["url"]))
    if url.scheme not in ("http", "https") or not url.hostname:
        raise _NetError(_E_URL, f"URL rejected: {opts['url']}")
    conn, request = _request(opts, url)
    async with await _open(sh, url) as stream:
        response, payload = await _exchange(stream, conn, request)
    if opts.get("fail") and response.status_code >= 400:
        raise _NetError(_E_HTTP, f"The requested URL returned error: {response.status_code}")
    if opts.get("include") or opts.get("head"):
        head = f"HTTP/{response.http_version.decode()} {response.status_code} "
        head += response.reason.decode("latin-1") + "\r\n"
        head += "".join(f"{k.decode()}: {v.decode('latin-1')}\r\n" for k, v in response.headers)
        payload = head.encode("latin-1") + b"\r\n" + payload
    if opts.get("output"):
        await sh.device.push(device_path(str(opts["output"])), payload)
    else:
        await io.stdout(payload)
    return 0


@command("curl")
async def _curl(sh: Interpreter, argv: Sequence[str], io: CommandIO) -> int:
    opts = _curl_args(argv)
    try:
        timeout = float(str(opts.get("max_time", _DEFAULT_TIMEOUT_S)))
    except ValueError:
        raise ParseError("curl: -m: expected a number of seconds") from None
    try:
        with trio.fail_after(timeout):
            return await _curl_once(sh, opts, io)
    except trio.TooSlowError:
        code, message = _E_TIMEOUT, f"Operation timed out after {timeout:g} seconds"
    except _NetError as exc:
        code, message = exc.code, str(exc)
    except (h11.RemoteProtocolError, trio.BrokenResourceError, OSError) as exc:
        code, message = _E_RECV, f"Failure when receiving data from the peer: {exc}"
    if not opts["silent"] or opts["show_error"]:
        await io.err(f"curl: ({code}) {message}\n")
    return code


@command("nc")
async def _nc(sh: Interpreter, argv: Sequence[str], io: CommandIO) -> int:
    args = list(argv[1:])
    timeout = _DEFAULT_TIMEOUT_S
    if args[:1] == ["-w"] and len(args) >= 2:
        timeout = float(args[1])
        args = args[2:]
    if len(args) != 2 or not args[1].isdigit():
        await io.err("usage: nc [-w SECONDS] HOST PORT\n")
        return 1
    host, port = args[0], int(args[1])
    try:
        with trio.fail_after(timeout):
            stream = await _connect(sh, host, port)
            async with stream:
                while data := await io.stdin.read():
                    await stream.send_all(data)
                if isinstance(stream, trio.abc.HalfCloseableStream):
                    await stream.send_eof()
                while received := await stream.receive_some(_CHUNK):
                    await io.stdout(bytes(received))
    except trio.TooSlowError:
        await io.err(f"nc: {host}:{port}: timed out\n")
        return 1
    except _NetError as exc:
        await io.err(f"nc: {exc}\n")
        return 1
    except (trio.BrokenResourceError, OSError) as exc:
        await io.err(f"nc: {host}:{port}: {exc}\n")
        return 1
    return 0
