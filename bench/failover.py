"""`python -m bench failover`: how long a kill -9 of the server replica holding a tunnel's
active connector costs the tunnel and the device streams (issue 23's "the tunnel serves again
within 2 s, device streams reconnect"; docs/scale-out.md "Kill -9: where the time goes").

The deployment is the done-when test's rig (tests/e2e/_replica_rig.py): PostgreSQL, three
`devyard server` replicas behind Debian's HAProxy, two host daemons and two connectors of one
tunnel, all real processes on loopback, each host and connector with one link (the rig
advertises no direct replica URLs). One ready instance per host, and ``--extra`` more (the
done-when test's hosts link again with 250 instances each).

Each of ``--rounds`` rounds (``--failover`` is the same option): wait until every device
fetches through the tunnel and a device stream runs, kill -9 the replica that holds the
tunnel's active connector (``link_holders``), then measure from the kill:

- ``tunnel_s``: until a fetch through the tunnel works again from every device (a ``curl``
  in the device's shell through the load balancer, each device polled in its own task, the
  done-when test's probe);
- ``stream_s``: until a new device stream through the load balancer gives a frame, for the
  instance on a host the killed replica held (else the first instance);

then restart the killed replica (same id) before the next round. A kill comes at least
``--settle`` s (61) after the previous one: links that were up a minute redial as after a
long healthy run (`Backoff.reset_after`); a link lost twice within a minute backs off more.
Also per round: which replica held what, and (``--trace``) the processes' log lines of the
first seconds after the kill, one timeline. The last line is one JSON object ``{"bench":
"failover", "rounds": [...], "tunnel_s": {p50, max}, "stream_s": {p50, max}, "target_s": 2.0,
"met": ...}``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Final

import httpx
import trio
import trio_websocket

from devyard.server.store.pgcluster import TemporaryCluster
from tests.e2e._replica_rig import FIRST, SECOND, Replica, Rig, open_rig, readyz, wait_for

TARGET_S: Final = 2.0
_MEDIA_HEADER: Final = 10  # >BBQ before each media frame
_STAMP: Final = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def _http(rig: Rig, **kwargs: Any) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {rig.key}"}
    return httpx.AsyncClient(base_url=rig.lb, headers=headers, **kwargs)


async def _instances(rig: Rig, extra: int) -> dict[str, dict[str, Any]]:
    """One ready instance per host: host id -> the instance's status (and *extra* more
    instances, ready, which the hosts name in their hello when they link again)."""
    found: dict[str, dict[str, Any]] = {}
    async with _http(rig, timeout=120) as http:

        async def create() -> None:
            body = {"spec": {"tunnel": rig.tunnel}}
            made = await http.post("/v1/android_instances", params={"wait": "true"}, json=body)
            assert made.status_code == 200, made.text

        for start in range(0, extra, 20):
            async with trio.open_nursery() as nursery:
                for _ in range(min(20, extra - start)):
                    nursery.start_soon(create)
        for _ in range(8):
            rows = rig.query("SELECT id, host_id FROM instances WHERE state = 'ready' ORDER BY id")
            for instance_id, host_id in rows:
                if str(host_id) not in found:
                    got = await http.get(f"/v1/android_instances/{instance_id}")
                    found[str(host_id)] = got.json()["status"]
            if len(found) == len(rig.hosts):
                return found
            await create()
    raise AssertionError(f"no instance on every host: {sorted(found)}")


async def _fetches(status: dict[str, Any], rig: Rig) -> bool:
    """A fetch through the tunnel from the device's shell, through the load balancer."""
    headers = {"Authorization": f"Bearer {status['token']}"}
    command = f"curl -sS -m 2 http://{rig.private.address}/"
    try:
        async with httpx.AsyncClient(headers=headers, timeout=10) as client:
            got = await client.post(status["apiUrl"] + "/shell", json={"command": command})
    except httpx.HTTPError:
        return False
    if got.status_code != 200:
        return False
    result = got.json()
    return bool(result.get("exitCode") == 0 and len(result["stdout"]) == len(FIRST + SECOND))


async def _frame(status: dict[str, Any]) -> bool:
    """A new device stream through the load balancer gives a JPEG frame within 5 s."""
    url = status["endpointWebSocketUrl"] + f"?token={status['streamToken']}"
    try:
        with trio.fail_after(5):
            async with trio_websocket.open_websocket_url(url) as ws:
                while not isinstance(hello := await ws.get_message(), str):
                    pass
                if json.loads(hello).get("type") != "hello":
                    return False
                await ws.send_message(json.dumps({"type": "start", "codec": "jpeg"}))
                while True:
                    message = await ws.get_message()
                    if isinstance(message, bytes):
                        return message[_MEDIA_HEADER : _MEDIA_HEADER + 2] == b"\xff\xd8"
    except (
        trio.TooSlowError,
        trio_websocket.HandshakeError,
        trio_websocket.ConnectionClosed,
        OSError,
    ):
        return False


async def _first_success(probe: Any, *args: Any, limit: float = 30.0) -> float:
    """Seconds (monotonic) at the end of the first successful *probe*, polled every 20 ms."""
    with trio.fail_after(limit):
        while not await probe(*args):  # noqa: ASYNC110 - polling an answer over HTTP
            await trio.sleep(0.02)
    return time.monotonic()


def _timeline(rig: Rig, since: float, window: float) -> list[str]:
    """Log lines of every process from *since* (wall clock) for *window* s, in time order,
    each prefixed with its offset in ms and the process's log name."""
    lines: list[tuple[float, str]] = []
    for path in sorted(rig.tmp.glob("*.log")):
        if path.name == "haproxy.log":
            continue
        for line in path.read_text(errors="replace").splitlines():
            match = _STAMP.match(line)
            if not match:
                continue
            at = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            if since - 0.05 <= at <= since + window:
                text = line[match.end() :]
                lines.append((at, f"{(at - since) * 1000:+7.0f} ms {path.stem:12} {text[:220]}"))
    return [text for _, text in sorted(lines)]


async def _settled(rig: Rig, statuses: list[dict[str, Any]], stream_of: dict[str, Any]) -> None:
    """Before a round: every host and the connector held by a live replica, every device
    fetching through the tunnel, a device stream answering."""

    async def ready() -> bool:
        alive = await trio.to_thread.run_sync(rig.live_replicas)
        holders = [await trio.to_thread.run_sync(rig.holder, "host", h.host_id) for h in rig.hosts]
        connector = await trio.to_thread.run_sync(rig.holder, "connector", rig.tunnel_id)
        if connector not in alive or not all(h in alive for h in holders):
            return False
        for status in statuses:
            if not await _fetches(status, rig):
                return False
        return await _frame(stream_of)

    await _first_success(ready, limit=90)


async def _round(
    rig: Rig, statuses: dict[str, dict[str, Any]], args: argparse.Namespace, since: float
) -> dict[str, Any]:
    first = next(iter(statuses.values()))
    await _settled(rig, list(statuses.values()), first)
    # links up this long redial as after a long healthy run (the backoff's reset_after)
    await trio.sleep_until(since + args.settle)
    killed_name = rig.holder("connector", rig.tunnel_id)
    assert killed_name is not None
    killed = rig.replicas[killed_name]
    held_hosts = [h.host_id for h in rig.hosts if rig.holder("host", h.host_id) == killed_name]
    stream_of = statuses[held_hosts[0]] if held_hosts else first
    assert killed.proc.process is not None
    killed_wall = time.time()
    killed_at, killed_clock = time.monotonic(), trio.current_time()
    killed.proc.process.kill()
    killed.proc.process.wait()
    per_device: dict[str, float] = {}
    stream_at = 0.0

    async def device(host_id: str, status: dict[str, Any]) -> None:
        per_device[host_id] = await _first_success(_fetches, status, rig) - killed_at

    async def stream() -> None:
        nonlocal stream_at
        stream_at = await _first_success(_frame, stream_of) - killed_at

    async with trio.open_nursery() as nursery:
        for host_id, status in statuses.items():
            nursery.start_soon(device, host_id, status)
        nursery.start_soon(stream)
    row: dict[str, Any] = {
        "killed": killed_name,
        "killed_held_hosts": len(held_hosts),
        "tunnel_s": round(max(per_device.values()), 3),
        "per_device_s": {h[-6:]: round(s, 3) for h, s in per_device.items()},
        "stream_s": round(stream_at, 3),
    }
    if args.trace:
        await trio.sleep(0.5)  # the last lines reach the files
        row["trace"] = _timeline(rig, killed_wall, max(row["tunnel_s"], row["stream_s"]) + 0.3)
    killed.proc.start()  # the same id and data dir again
    await trio.to_thread.run_sync(_back, rig, killed)
    row["_killed_at"] = killed_clock
    return row


def _back(rig: Rig, replica: Replica) -> None:
    wait_for(lambda: readyz(replica.url), 120, f"{replica.name}'s /readyz")
    wait_for(lambda: rig.up_in_haproxy(replica.name), 30, f"{replica.name} up in haproxy")


def _quantiles(values: list[float]) -> dict[str, float]:
    return {"p50": round(statistics.median(values), 3), "max": round(max(values), 3)}


async def _run(rig: Rig, args: argparse.Namespace) -> dict[str, Any]:
    statuses = await _instances(rig, args.extra)
    rounds = []
    since = trio.current_time()  # the rig's links came up before this
    for n in range(args.rounds):
        row = await _round(rig, statuses, args, since)
        since = row.pop("_killed_at")
        trace = row.pop("trace", [])
        print(
            f"round {n + 1}: kill -9 {row['killed']} (held {row['killed_held_hosts']} host(s)):"
            f" tunnel {row['tunnel_s']:.2f} s {row['per_device_s']},"
            f" stream {row['stream_s']:.2f} s",
            flush=True,
        )
        for line in trace:
            print("    " + line)
        rounds.append(row)
    tunnel = [r["tunnel_s"] for r in rounds]
    stream = [r["stream_s"] for r in rounds]
    return {
        "bench": "failover",
        "config": {"settle_s": args.settle, "extra_instances": args.extra},
        "rounds": rounds,
        "tunnel_s": _quantiles(tunnel),
        "stream_s": _quantiles(stream),
        "target_s": TARGET_S,
        "met": {"tunnel": max(tunnel) < TARGET_S, "stream": max(stream) < TARGET_S},
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench failover", description=__doc__)
    parser.add_argument("--rounds", "--failover", type=int, default=5, help="kills (5)")
    parser.add_argument(
        "--settle", type=float, default=61.0, help="s from a round's kill to the next (61)"
    )
    parser.add_argument("--extra", type=int, default=0, help="more ready instances (0)")
    parser.add_argument("--trace", action="store_true", help="print each kill's log timeline")
    parser.add_argument("--keep", action="store_true", help="keep the logs' directory")
    args = parser.parse_args(argv)
    cluster = TemporaryCluster.start()
    tmp = Path(tempfile.mkdtemp(prefix="bench-failover-"))
    try:
        with open_rig(cluster.create_schema(), tmp, capacity=args.extra // 2 + 8) as rig:
            result = trio.run(_run, rig, args)
    finally:
        cluster.stop()
        if args.keep:
            print(f"logs: {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(result))
    return 0
