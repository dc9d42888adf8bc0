"""The load client of `python -m bench tunnel`: plain blocking sockets, one thread each.

It speaks the Go sink's protocol (bench/goyamux mode `sink`): a connection whose first byte is
`B` gets bulk data until the client closes; any other first byte is echoed and the sink closes.
With `via` set, every connection first asks an HTTP proxy for `CONNECT via` and waits for its
`200` (hostd's egress proxy); without it the client talks to the entry directly (the sink, or
the `ssh -L` listener). A `via` of the form `USER:PASSWORD@HOST:PORT` sends those proxy
credentials (each tunnel-attached instance's proxy has its own; a device reads them with
`getprop devyard.proxy`).

The client is Python rather than the Go load client of `bench mux` because that one cannot
speak CONNECT. Receiving with `recv_into` into one 256 KiB buffer releases the GIL for the
copy, so a thread moves well above 10 Gbit/s on loopback (`direct` shows the ceiling in every
run).
"""

from __future__ import annotations

import base64
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import unquote

IO_BUFFER: Final = 256 << 10
CONNECT_TIMEOUT: Final = 10.0


class ProxyRefused(ConnectionError):
    """The proxy answered CONNECT with something other than 200."""


def connect_request(via: str) -> bytes:
    """``CONNECT`` for *via* (``[USER:PASSWORD@]HOST:PORT``), with Basic proxy credentials."""
    credentials, _, target = via.rpartition("@")
    auth = ""
    if credentials:
        token = base64.b64encode(unquote(credentials).encode()).decode()
        auth = f"Proxy-Authorization: Basic {token}\r\n"
    return f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n{auth}\r\n".encode()


def open_conn(
    entry: tuple[str, int], via: str | None, timeout: float = CONNECT_TIMEOUT
) -> tuple[socket.socket, bytes]:
    """A connection to `entry`, through `CONNECT via` when set; returns it and any bytes read
    past the proxy's answer."""
    sock = socket.create_connection(entry, timeout=timeout)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if via is None:
            return sock, b""
        sock.sendall(connect_request(via))
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                raise ProxyRefused("the proxy closed before answering CONNECT")
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        status = head.split(b"\r\n", 1)[0].decode(errors="replace")
        if status.split(" ")[1:2] != ["200"]:
            raise ProxyRefused(f"proxy: {status} {rest[:200].decode(errors='replace').strip()}")
        return sock, rest
    except BaseException:
        sock.close()
        raise


def echo_once(entry: tuple[str, int], via: str | None, timeout: float = CONNECT_TIMEOUT) -> None:
    """One full stream lifetime: connect (and CONNECT), send 1 byte, read it back, read the
    sink's close, close. Raises on any failure."""
    sock, got = open_conn(entry, via, timeout)
    with sock:
        sock.sendall(b"x")
        while not got:
            got = sock.recv(64)
            if not got:
                raise ConnectionError("closed before the echo")
        if got[:1] != b"x":
            raise ConnectionError(f"bad echo {got[:16]!r}")
        while sock.recv(64):
            pass


@dataclass
class Outcome:
    rate: float  # Gbit/s for bulk, opens/s for opens
    total: int  # bytes (bulk) or opens (opens) over warmup + window
    errors: int = 0
    last_error: str = ""
    extra: dict[str, float] = field(default_factory=dict)


class _Workers:
    """Threads that each add to their own counter until told to stop; the caller snapshots the
    sum at the start and the end of the window."""

    def __init__(self, n: int) -> None:
        self.counts = [0] * n
        self.stop = threading.Event()
        self.errors = 0
        self.last_error = ""
        self._lock = threading.Lock()

    def failed(self, exc: BaseException) -> None:
        with self._lock:
            self.errors += 1
            self.last_error = f"{type(exc).__name__}: {exc}"

    def run(self, target: object, warmup: float, duration: float) -> tuple[float, int, int]:
        threads = [
            threading.Thread(target=target, args=(i,), daemon=True)  # type: ignore[arg-type]
            for i in range(len(self.counts))
        ]
        for t in threads:
            t.start()
        time.sleep(warmup)
        start, before = time.perf_counter(), sum(self.counts)
        time.sleep(duration)
        end, after = time.perf_counter(), sum(self.counts)
        self.stop.set()
        for t in threads:
            t.join(CONNECT_TIMEOUT + 5)
        return end - start, after - before, sum(self.counts)


def bulk(
    entry: tuple[str, int], via: str | None, streams: int, warmup: float, duration: float
) -> Outcome:
    """Receive from `streams` sink connections at once; Gbit/s over the window."""
    workers = _Workers(streams)

    def receive(i: int) -> None:
        try:
            sock, early = open_conn(entry, via)
            with sock:
                workers.counts[i] += len(early)
                sock.sendall(b"B")
                buf = bytearray(IO_BUFFER)
                while not workers.stop.is_set():
                    n = sock.recv_into(buf)
                    if n == 0:
                        raise ConnectionError("the path closed the bulk stream")
                    workers.counts[i] += n
        except OSError as exc:
            if not workers.stop.is_set():
                workers.failed(exc)

    seconds, window, total = workers.run(receive, warmup, duration)
    return Outcome(window * 8 / seconds / 1e9, total, workers.errors, workers.last_error)


def opens(
    entry: tuple[str, int], via: str | None, concurrency: int, warmup: float, duration: float
) -> Outcome:
    """`concurrency` workers loop over `echo_once`; completed opens per second of the window."""
    workers = _Workers(concurrency)

    def loop(i: int) -> None:
        while not workers.stop.is_set():
            try:
                echo_once(entry, via)
            except OSError as exc:
                workers.failed(exc)
                time.sleep(0.01)
            else:
                workers.counts[i] += 1

    seconds, window, total = workers.run(loop, warmup, duration)
    return Outcome(window / seconds, total, workers.errors, workers.last_error)
