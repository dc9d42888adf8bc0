"""The egress proxy's handshake, without I/O: bytes in, events out (house style: sans-I/O).

One `Handshake` per client connection. `receive_data` takes whatever the client sent and
returns events; nothing awaits in the middle of a parse. The first byte tells the protocols
apart:

- ``0x05``: SOCKS5 (RFC 1928), CONNECT only, IPv4 / domain / IPv6 addresses, with
  username/password authentication (RFC 1929) when the proxy has credentials;
- anything else: an HTTP/1.1 proxy request parsed by h11, either ``CONNECT host:port`` or an
  absolute-form request (``GET http://host/path``) that plain-HTTP proxy clients send, which is
  forwarded in origin form with ``Connection: close``. Credentials come as
  ``Proxy-Authorization: Basic ...``; without them the answer is 407.

Events: `Reply` (write these bytes, keep reading), `Dial` (the client asked for host:port and
is authenticated: connect, then write `Handshake.succeeded()` or `Handshake.failed(...)`),
`Reject` (write these bytes, then close). Sizes are bounded: an HTTP head over
`MAX_HEAD` bytes or anything a SOCKS client sends that is not the protocol ends that client's
connection with a `Reject`, never an exception.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hmac
import ipaddress
import re
import struct
from collections.abc import Iterable
from typing import Final, TypeAlias
from urllib.parse import urlsplit

import attrs
import h11

__all__ = [
    "MAX_HEAD",
    "Credentials",
    "Dial",
    "DialFailure",
    "Event",
    "Handshake",
    "Reject",
    "Reply",
]

MAX_HEAD: Final = 16 * 1024
_HEAD_END: Final = re.compile(rb"\n\r?\n")  # where h11 ends a head too
_DROPPED: Final = frozenset({b"proxy-authorization", b"proxy-connection", b"connection"})


@attrs.frozen(repr=False)
class Credentials:
    """The user name and password a proxy client must present (never shown in a repr)."""

    username: str
    password: str

    def __repr__(self) -> str:
        return f"Credentials({self.username!r}, ***)"

    def matches(self, username: bytes, password: bytes) -> bool:
        ok_user = hmac.compare_digest(username, self.username.encode())
        ok_password = hmac.compare_digest(password, self.password.encode())
        return ok_user and ok_password


class DialFailure(enum.Enum):
    """Why a requested connection was not made (what the client is told)."""

    NOT_ALLOWED = "not allowed"  # the host's policy, or the tunnel's selectors
    REFUSED = "connection refused"
    UNREACHABLE = "host unreachable"
    TIMEOUT = "timed out"
    UNAVAILABLE = "unavailable"  # the tunnel or the host's link is down


@attrs.frozen
class Reply:
    data: bytes


@attrs.frozen
class Dial:
    host: str
    port: int
    forward: bytes  # to send upstream before relaying (an absolute-form request, re-encoded)


@attrs.frozen
class Reject:
    data: bytes
    reason: str  # for a debug log line


Event: TypeAlias = Reply | Dial | Reject

# SOCKS5 reply codes (RFC 1928 section 6)
_SOCKS_REPLY: Final = {
    None: 0,
    DialFailure.UNAVAILABLE: 1,
    DialFailure.NOT_ALLOWED: 2,
    DialFailure.UNREACHABLE: 4,
    DialFailure.REFUSED: 5,
    DialFailure.TIMEOUT: 6,
}
_SOCKS_COMMAND_UNSUPPORTED: Final = 7
_SOCKS_ADDRESS_UNSUPPORTED: Final = 8
_HTTP_STATUS: Final = {
    DialFailure.NOT_ALLOWED: (403, "Forbidden"),
    DialFailure.REFUSED: (502, "Bad Gateway"),
    DialFailure.UNREACHABLE: (502, "Bad Gateway"),
    DialFailure.UNAVAILABLE: (502, "Bad Gateway"),
    DialFailure.TIMEOUT: (504, "Gateway Timeout"),
}


def _socks_reply(code: int) -> bytes:
    return bytes([5, code, 0, 1, 0, 0, 0, 0, 0, 0])


def http_error(status: int, reason: str, message: str, *extra: str) -> bytes:
    body = (message + "\n").encode()
    head = "".join(
        [
            f"HTTP/1.1 {status} {reason}\r\n",
            *(line + "\r\n" for line in extra),
            f"Content-Type: text/plain\r\nContent-Length: {len(body)}\r\n",
            "Connection: close\r\n\r\n",
        ]
    )
    return head.encode("latin-1") + body


class _State(enum.Enum):
    FIRST = enum.auto()
    SOCKS_METHODS = enum.auto()
    SOCKS_AUTH = enum.auto()
    SOCKS_REQUEST = enum.auto()
    HTTP = enum.auto()
    DIALLING = enum.auto()
    DONE = enum.auto()


class Handshake:
    """One client's proxy handshake (see the module docstring)."""

    def __init__(self, credentials: Credentials | None) -> None:
        self._credentials = credentials
        self._state = _State.FIRST
        self._buffer = bytearray()
        self._http: h11.Connection | None = None
        self._socks = False
        self._connect = False
        self._consumed = bytearray()  # the raw HTTP bytes given to h11 (to find the head's end)
        #: what the client sent past its request: relay it upstream after `Dial`
        self.trailing = b""

    # ---- input ------------------------------------------------------------------------------

    def receive_data(self, data: bytes) -> list[Event]:
        """Feed what the client sent; the events it completes (empty: send more)."""
        if self._state in (_State.DIALLING, _State.DONE):
            raise RuntimeError("the handshake is over: relay, do not parse")
        if not data:
            self._state = _State.DONE
            return [Reject(b"", "the client closed before its request")]
        self._buffer += data
        events: list[Event] = []
        while self._state not in (_State.DIALLING, _State.DONE):
            event = self._step()
            if event is None:
                break
            events.append(event)
            if isinstance(event, Reject):
                self._state = _State.DONE
        return events

    def _step(self) -> Event | None:
        if self._state is _State.FIRST:
            if self._buffer[0] == 5:
                self._socks, self._state = True, _State.SOCKS_METHODS
            elif self._buffer[0] == 4:
                return Reject(bytes([0, 91, 0, 0, 0, 0, 0, 0]), "SOCKS4 is not supported")
            else:
                self._state = _State.HTTP
                self._http = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
            return self._step()
        if self._state is _State.SOCKS_METHODS:
            return self._socks_methods()
        if self._state is _State.SOCKS_AUTH:
            return self._socks_auth()
        if self._state is _State.SOCKS_REQUEST:
            return self._socks_request()
        return self._http_head()

    # ---- SOCKS5 -----------------------------------------------------------------------------

    def _take(self, n: int) -> bytes:
        out = bytes(self._buffer[:n])
        del self._buffer[:n]
        return out

    def _socks_methods(self) -> Event | None:
        if len(self._buffer) < 2 or len(self._buffer) < 2 + self._buffer[1]:
            return None
        _, count = self._take(2)
        methods = self._take(count)
        wanted = 0 if self._credentials is None else 2
        if wanted not in methods:
            return Reject(b"\x05\xff", "no acceptable SOCKS authentication method")
        self._state = _State.SOCKS_REQUEST if wanted == 0 else _State.SOCKS_AUTH
        return Reply(bytes([5, wanted]))

    def _socks_auth(self) -> Event | None:
        buf = self._buffer
        if len(buf) < 2:
            return None
        if buf[0] != 1:
            return Reject(b"\x01\x01", "bad SOCKS authentication version")
        if len(buf) < 3 + buf[1] or len(buf) < 3 + buf[1] + buf[2 + buf[1]]:
            return None
        ulen = buf[1]
        plen = buf[2 + ulen]
        username, password = bytes(buf[2 : 2 + ulen]), bytes(buf[3 + ulen : 3 + ulen + plen])
        self._take(3 + ulen + plen)
        assert self._credentials is not None
        if not self._credentials.matches(username, password):
            return Reject(b"\x01\x01", "wrong proxy credentials")
        self._state = _State.SOCKS_REQUEST
        return Reply(b"\x01\x00")

    def _socks_request(self) -> Event | None:
        buf = self._buffer
        if len(buf) < 4:
            return None
        version, command, _, kind = buf[:4]
        if version != 5:
            return Reject(_socks_reply(1), "bad SOCKS version")
        if kind not in (1, 3, 4):
            return Reject(_socks_reply(_SOCKS_ADDRESS_UNSUPPORTED), "bad SOCKS address type")
        if kind == 3 and len(buf) < 5:
            return None
        sizes = {1: 4, 3: 1 + buf[4] if kind == 3 else 0, 4: 16}
        end = 4 + sizes[kind] + 2
        if len(buf) < end:
            return None
        raw = self._take(end)
        (port,) = struct.unpack(">H", raw[-2:])
        if command != 1:
            return Reject(_socks_reply(_SOCKS_COMMAND_UNSUPPORTED), "only SOCKS CONNECT")
        if kind == 1:
            host = str(ipaddress.IPv4Address(raw[4:8]))
        elif kind == 4:
            host = str(ipaddress.IPv6Address(raw[4:20]))
        else:
            try:
                host = raw[5:-2].decode("ascii")
            except UnicodeDecodeError:
                return Reject(_socks_reply(_SOCKS_ADDRESS_UNSUPPORTED), "a non-ASCII name")
        if not host or port == 0:
            return Reject(_socks_reply(_SOCKS_ADDRESS_UNSUPPORTED), "no destination")
        return self._dial(host, port, b"")

    # ---- HTTP -------------------------------------------------------------------------------

    def _http_head(self) -> Event | None:
        http = self._http
        assert http is not None
        if self._buffer:
            http.receive_data(bytes(self._buffer))
            self._consumed += self._buffer
            self._buffer.clear()
        too_large = Reject(
            http_error(431, "Request Header Fields Too Large", "proxy request head too large"),
            f"a head over {MAX_HEAD} bytes",
        )
        try:
            event = http.next_event()
        except h11.RemoteProtocolError as exc:
            if len(self._consumed) > MAX_HEAD and not _HEAD_END.search(self._consumed):
                return too_large
            return Reject(http_error(400, "Bad Request", "malformed proxy request"), str(exc))
        if event is h11.NEED_DATA:
            return None
        if not isinstance(event, h11.Request):
            return Reject(http_error(400, "Bad Request", "malformed proxy request"), repr(event))
        match = _HEAD_END.search(self._consumed)
        assert match is not None  # h11 produced a Request: the head is complete
        if match.end() > MAX_HEAD:
            return too_large
        rest = bytes(self._consumed[match.end() :])
        if not self._authorized(event.headers):
            return Reject(
                http_error(
                    407,
                    "Proxy Authentication Required",
                    "proxy authentication required",
                    'Proxy-Authenticate: Basic realm="devyard"',
                ),
                "missing or wrong proxy credentials",
            )
        method = event.method.decode("ascii")
        target = event.target.decode("ascii")
        if method == "CONNECT":
            host, _, port_text = target.rpartition(":")
            host = host.removeprefix("[").removesuffix("]")
            forward = b""
            self._connect = True
        else:
            url = urlsplit(target)
            if url.scheme != "http" or not url.hostname:
                message = "a proxy request needs an absolute http:// URL"
                return Reject(http_error(400, "Bad Request", message), message)
            try:
                port_text = str(url.port or 80)
            except ValueError:
                port_text = ""
            host = url.hostname
            path = (url.path or "/") + (f"?{url.query}" if url.query else "")
            forward = _origin_form(event, path)
        if not port_text.isdigit() or not 0 < int(port_text) < 65536 or not host:
            message = f"bad destination {target!r}"
            return Reject(http_error(400, "Bad Request", message), message)
        self.trailing = rest
        return self._dial(host, int(port_text), forward)

    def _authorized(self, headers: Iterable[tuple[bytes, bytes]]) -> bool:
        if self._credentials is None:
            return True
        for name, value in headers:
            if name != b"proxy-authorization":
                continue
            scheme, _, encoded = value.partition(b" ")
            if scheme.lower() != b"basic":
                continue
            try:
                decoded = base64.b64decode(encoded.strip(), validate=True)
            except (binascii.Error, ValueError):
                continue
            username, sep, password = decoded.partition(b":")
            if sep and self._credentials.matches(username, password):
                return True
        return False

    # ---- the outcome ------------------------------------------------------------------------

    def _dial(self, host: str, port: int, forward: bytes) -> Dial:
        if self._socks:
            self.trailing = bytes(self._buffer)
            self._buffer.clear()
        self._state = _State.DIALLING
        return Dial(host, port, forward)

    def succeeded(self) -> bytes:
        """What to write to the client once the connection is up."""
        self._finish()
        if self._socks:
            return _socks_reply(0)
        return b"HTTP/1.1 200 Connection established\r\n\r\n" if self._connect else b""

    def failed(self, failure: DialFailure) -> bytes:
        """What to write to the client before closing: the failure's class, nothing more."""
        self._finish()
        if self._socks:
            return _socks_reply(_SOCKS_REPLY[failure])
        status, reason = _HTTP_STATUS[failure]
        return http_error(status, reason, failure.value)

    def _finish(self) -> None:
        if self._state is not _State.DIALLING:
            raise RuntimeError("no dial to answer")
        self._state = _State.DONE


def _origin_form(request: h11.Request, path: str) -> bytes:
    """The absolute-form *request* re-encoded for the origin server (h11 validated it)."""
    version = request.http_version.decode("ascii")
    lines = [f"{request.method.decode('ascii')} {path} HTTP/{version}".encode("latin-1")]
    for name, value in request.headers.raw_items():
        if name.lower() not in _DROPPED:
            lines.append(name + b": " + value)
    lines.append(b"Connection: close")
    return b"\r\n".join(lines) + b"\r\n\r\n"
