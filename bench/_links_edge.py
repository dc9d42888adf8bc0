"""The real-edge sides of `bench links`: idle host links and idle viewers on a real server.

    python -m bench._links_edge server WORKDIR --hosts N [--max-streams M]
    python -m bench._links_edge hosts --url URL --tokens FILE [--link tcp://H:P] [--freeze-every K]
    python -m bench._links_edge viewers --url WSURL --count N [--freeze-every K]

``server``: the real server (`serve_server`: store, API, edge, instances service) with an
organization (its admin key in WORKDIR/api-key) and N host tokens (WORKDIR/host-tokens, one a
line; 0600), ``max_streams_per_instance`` at ``--max-streams``, its collector tuned as
`devyard server` tunes it. It prints ``READY {json}`` (url, api_key_file, tokens_file, link),
then ``LINKS n`` once the edge lists n hosts (it stops looking then).

``hosts``: N host links, one per token, each the core link client speaking hostd's hello (no
devices, no instances) to the edge's host route: a WebSocket on the API port, or the raw link
port with ``--link``. A link that ends is dialled again (stderr says why). ``READY n`` once
all are registered.

``viewers``: N WebSockets to an instance's stream endpoint (``endpointWebSocketUrl`` with its
``streamToken``), each saying ``start`` (protocol 2, H.264) and acking every frame as the page
does; ``READY n`` once each has its first frame. Each frame after that is a line ``idle
frame`` on stderr, which the harness counts.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from contextlib import AsyncExitStack
from functools import partial
from pathlib import Path
from typing import Any

import trio
import trio_websocket

from bench._child import CONNECTION_ERRORS, run_with_lifeline
from bench._links_peer import _DIALS_AT_ONCE, _Freezer, raise_fd_limit
from devyard._process import tune_collector
from devyard.core import ControlChannel, open_session
from devyard.core._groups import leaves
from devyard.core.link import HOST_PATH, PROTO
from devyard.core.transports import link_url, open_transport
from devyard.server.api.serve import BoundServer
from devyard.server.bootstrap import bootstrap_organization
from devyard.server.config import ListenAddress, ServerConfig
from devyard.server.edge import HOST_TOKENS_FILE, create_host_token
from devyard.server.serve import open_configured_store, serve_server

_REGION = ServerConfig(data_dir=Path(".")).region


async def _server(workdir: Path, hosts: int, streams: int) -> None:
    server_dir = workdir / "server"
    config = ServerConfig(
        data_dir=server_dir,
        listen=ListenAddress("127.0.0.1", 0),
        link_listen=ListenAddress("127.0.0.1", 0),
        max_streams_per_instance=streams,
    )
    async with open_configured_store(config) as store:
        made = await bootstrap_organization(store, org_name="bench")
    key_file, tokens_file = workdir / "api-key", workdir / "host-tokens"
    key_file.write_text(made.plaintext_key)
    tokens = [create_host_token(server_dir / HOST_TOKENS_FILE)[1] for _ in range(max(1, hosts))]
    tokens_file.touch(mode=0o600)
    tokens_file.write_text("".join(f"{token}\n" for token in tokens))
    tune_collector()  # as `devyard server` does once loaded
    async with trio.open_nursery() as nursery:
        bound: BoundServer = await nursery.start(partial(serve_server, config))
        info = {
            "url": bound.local_url,
            "api_key_file": str(key_file),
            "tokens_file": str(tokens_file),
            "link": f"tcp://127.0.0.1:{bound.link_port}",
        }
        print("READY " + json.dumps(info), flush=True)
        if hosts:
            while not (bound.hosts and len(bound.hosts.hosts()) >= hosts):  # noqa: ASYNC110
                await trio.sleep(0.2)
            print(f"LINKS {hosts}", flush=True)


async def _baseline() -> None:
    print("BASE", flush=True)
    await trio.sleep(1.0)


def _hello(i: int) -> dict[str, Any]:
    """hostd's hello (devyard/hostd), for a host with no devices and no instances."""
    return {
        "type": "hello",
        "proto": PROTO,
        "role": "host",
        "id": f"bench-host-{i}",
        "version": "0",
        "hostname": f"bench-host-{i}",
        "region": _REGION,
        "capacity": 0,
        "platforms": ["android"],
        "drivers": ["virtual"],
        "instances": [],
    }


async def _hosts(url: str, tokens: list[str], link: str | None, freezer: _Freezer) -> None:
    limit = trio.Semaphore(_DIALS_AT_ONCE)
    ready = [0]
    target = len(tokens)
    dial = link_url(url, HOST_PATH, link)
    await _baseline()

    async def host(i: int, token: str) -> None:
        headers = [(b"authorization", f"Bearer {token}".encode())]
        while True:  # as hostd does: a link that ends is dialled again
            registered = False
            reason = "the session ended"
            try:
                async with AsyncExitStack() as stack:
                    async with limit:
                        transport = await stack.enter_async_context(
                            open_transport(dial, extra_headers=headers)
                        )
                        session = await stack.enter_async_context(
                            open_session(transport, client=True)
                        )
                        control = ControlChannel(await session.open_stream())
                        await control.send(_hello(i))
                        answer = await control.receive()
                        if answer.get("type") != "registered":
                            raise trio.BrokenResourceError(f"not registered: {answer}")
                    registered = True
                    ready[0] += 1
                    freezer.link_up(ready[0])
                    if ready[0] == target:
                        print(f"READY {target}", flush=True)
                    while True:  # orders would come here; an idle host gets none
                        await control.receive()
            except* (*CONNECTION_ERRORS, trio.EndOfChannel) as group:
                reason = "; ".join(repr(exc) for exc in leaves(group))
            if registered:
                ready[0] -= 1
            state = "registered" if registered else "not registered"
            print(f"host {i} ({state}) ended; dialling again: {reason}", file=sys.stderr)
            await trio.sleep(0.5)

    async with trio.open_nursery() as nursery:
        for i, token in enumerate(tokens):
            nursery.start_soon(host, i, token)


async def _viewers(url: str, count: int, freezer: _Freezer) -> None:
    limit = trio.Semaphore(16)
    ready = [0]
    await _baseline()

    async def viewer(nursery: trio.Nursery) -> None:
        async with limit:
            ws = await trio_websocket.connect_websocket_url(nursery, url)
            start = {"type": "start", "protocol": 2, "accept": "h264", "ackWindow": 3}
            await ws.send_message(json.dumps(start))
            frames = 0
            while not frames:
                if not isinstance(await ws.get_message(), str):
                    frames += 1
                    await ws.send_message(json.dumps({"type": "ack", "count": frames}))
        ready[0] += 1
        freezer.link_up(ready[0])
        if ready[0] == count:
            print(f"READY {count}", flush=True)
        while True:
            message = await ws.get_message()
            if not isinstance(message, str):
                frames += 1
                print("idle frame", file=sys.stderr, flush=True)
                await ws.send_message(json.dumps({"type": "ack", "count": frames}))

    async with trio.open_nursery() as nursery:
        for _ in range(count):
            nursery.start_soon(viewer, nursery)


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    parser = argparse.ArgumentParser(prog="python -m bench._links_edge")
    parser.add_argument("role", choices=["server", "hosts", "viewers"])
    parser.add_argument("workdir", nargs="?", help="server: where its data goes")
    parser.add_argument("--hosts", type=int, default=0, help="server: host tokens to make")
    parser.add_argument(
        "--max-streams", type=int, default=16, help="server: max_streams_per_instance"
    )
    parser.add_argument("--url", help="hosts: the server's URL; viewers: the stream's URL")
    parser.add_argument("--tokens", help="hosts: the file of host tokens, one a line")
    parser.add_argument("--link", help="hosts: the raw link port, tcp://HOST:PORT")
    parser.add_argument("--count", type=int, default=0, help="viewers: how many")
    parser.add_argument("--freeze-every", type=int, default=0)
    args = parser.parse_args(argv)
    raise_fd_limit()
    freezer = _Freezer(args.freeze_every)
    if args.role == "server":
        if not args.workdir:
            parser.error("server needs WORKDIR")
        body = partial(_server, Path(args.workdir), args.hosts, args.max_streams)
    elif args.role == "hosts":
        if not (args.url and args.tokens):
            parser.error("hosts needs --url and --tokens")
        tokens = Path(args.tokens).read_text().split()
        body = partial(_hosts, args.url, tokens, args.link, freezer)
    else:
        if not (args.url and args.count):
            parser.error("viewers needs --url and --count")
        body = partial(_viewers, args.url, args.count, freezer)
    trio.run(run_with_lifeline, body)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
