"""A steady stream of the requests a user makes, run across the kill -9 of a replica in the
done-when test (tests/e2e/test_replicas_cluster.py), and the checks that no accepted request
is lost beyond those in flight (issue 23).

Every target (HAProxy, and each replica addressed directly) gets closed-loop workers, so each
has at most one request in flight at any moment: a *writer* creates instances (each with a
label of its own, `load=<tag>`) and deletes its older ones, keeping two; a *reader* gets the
instances the writers made; a *fetcher* fetches the tunnel's private page through a device's
shell. Each request is recorded (sent at, answered at, status, target). A worker addressing the
killed replica directly stops after its first request sent after the kill (refused: that server
is gone, which is no loss).
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Iterable
from typing import Any

import attrs
import httpx
import trio

from devyard.server.instances.sweeper import POLL_S, UNFINISHED_S
from tests.polling import until

from ._replica_rig import FIRST, SECOND, Rig

#: Every instance the stream creates carries this label key (its value: the create's tag).
LABEL = "load"
LB = "lb"
WORKERS = 3  # per target: a writer, a reader, a fetcher
#: How soon HAProxy marks a killed replica down (it checks every 1 s, `fall 1`)
HAPROXY_DOWN_BOUND = 3.0
_TIMEOUT = 20.0
_STUCK = ("creating", "assigned")


@attrs.define
class Call:
    kind: str  # create | delete | read | fetch
    via: str  # LB or the replica addressed directly
    sent: float  # trio.current_time()
    answered: float | None = None  # when its answer (or its error) came
    status: int | None = None  # None: no HTTP answer (connection refused, reset or closed)
    error: str = ""
    ok: bool = False  # 2xx (a fetch: and the whole private page through the tunnel)
    broken: bool = False  # no answer from devyard: the connection broke, or HAProxy's own 5xx
    instance: str | None = None
    tag: str = ""  # a create's label
    state: str = ""  # the instance's state in the answer

    def in_flight_at(self, moment: float) -> bool:
        return self.sent < moment and (self.answered is None or self.answered >= moment)


@attrs.define
class Fetch:
    """A device's API (its apiUrl on the load balancer) and token: the tunnel through it."""

    api_url: str
    token: str


class Load:
    def __init__(
        self, rig: Rig, targets: dict[str, str], fetches: list[Fetch], seed: int = 23
    ) -> None:
        self.rig = rig
        self.targets = targets  # LB or replica name -> base URL
        self.fetches = fetches
        self.calls: list[Call] = []
        self.killed: str | None = None
        self.killed_at: float | None = None
        self.stopping = False
        self._random = random.Random(seed)
        self._made: list[str] = []  # instances answered 2xx: what readers read
        self._tags = 0

    # ---- running ---------------------------------------------------------------------------

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            for via in self.targets:
                for step in (self._write, self._read, self._fetch):
                    nursery.start_soon(self._worker, via, step)
            task_status.started()

    def kill(self, name: str, at: float) -> None:
        self.killed, self.killed_at = name, at

    async def marked_down(self, name: str, seconds: float) -> float:
        """When HAProxy marked replica *name* down in its API backend (polled)."""

        async def down() -> bool:
            states = await trio.to_thread.run_sync(self.rig.haproxy, "show servers state")
            # be_name (2nd column), srv_name (4th), srv_op_state (6th): 2 = running
            rows = [r.split() for r in states.splitlines()]
            return any(
                len(r) > 5 and r[1] == "devyard_replicas" and r[3] == name and r[5] != "2"
                for r in rows
            )

        await until(down, seconds)
        return trio.current_time()

    def answered(self, via: str, after: float, each: int) -> bool:
        """Whether each worker on *via* had *each* calls sent after *after* answered 2xx."""
        kinds = Counter(
            "write" if c.kind in ("create", "delete") else c.kind
            for c in self.calls
            if c.via == via and c.sent > after and c.ok
        )
        return all(kinds[k] >= each for k in ("write", "read", "fetch"))

    async def _worker(self, via: str, step: Any) -> None:
        mine: list[str] = []
        headers = {"Authorization": f"Bearer {self.rig.key}"}
        url = self.targets[via]
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=_TIMEOUT) as client:
            while not self.stopping:
                call: Call = await step(client, via, mine)
                if via == self.killed and self.killed_at is not None and call.sent > self.killed_at:
                    return  # the server it addresses is gone: one refusal shows it

    async def _send(
        self, client: httpx.AsyncClient, call: Call, method: str, url: str, **kwargs: Any
    ) -> httpx.Response | None:
        self.calls.append(call)
        try:
            response = await client.request(method, url, **kwargs)
        except httpx.HTTPError as error:
            call.answered, call.error = trio.current_time(), f"{type(error).__name__}: {error}"
            call.broken = True
            return None
        call.answered, call.status = trio.current_time(), response.status_code
        call.ok = response.is_success
        if not call.ok:
            call.error = response.text[:200]
            # devyard answers {message, reason} JSON; HAProxy's 502/503/504 are its own pages
            json_body = response.headers.get("content-type", "").startswith("application/json")
            call.broken = response.status_code >= 500 and not json_body
        return response

    async def _write(self, client: httpx.AsyncClient, via: str, mine: list[str]) -> Call:
        if len(mine) > 2:  # delete the oldest of this writer's instances
            call = Call("delete", via, trio.current_time(), instance=mine.pop(0))
            got = await self._send(client, call, "DELETE", f"/v1/android_instances/{call.instance}")
            if got is not None and call.ok:
                call.state = got.json()["status"]["state"]
            return call
        self._tags += 1
        call = Call("create", via, trio.current_time(), tag=f"{via}-{self._tags}")
        body = {"metadata": {"labels": {LABEL: call.tag}}}
        got = await self._send(client, call, "POST", "/v1/android_instances", json=body)
        if got is not None and call.ok:
            call.instance, call.state = got.json()["metadata"]["id"], got.json()["status"]["state"]
            mine.append(call.instance)
            self._made.append(call.instance)
        return call

    async def _read(self, client: httpx.AsyncClient, via: str, mine: list[str]) -> Call:
        if not self._made:
            call = Call("read", via, trio.current_time())
            await self._send(client, call, "GET", "/v1/android_instances", params={"limit": 5})
            return call
        call = Call("read", via, trio.current_time(), instance=self._random.choice(self._made))
        got = await self._send(client, call, "GET", f"/v1/android_instances/{call.instance}")
        if got is not None and call.ok:
            call.state = got.json()["status"]["state"]
        return call

    async def _fetch(self, client: httpx.AsyncClient, via: str, mine: list[str]) -> Call:
        fetch = self.fetches[len(self.calls) % len(self.fetches)]
        # the device's API on the load balancer, or the same path on the replica addressed
        path = "/" + fetch.api_url.partition("://")[2].partition("/")[2] + "/shell"
        url = fetch.api_url + "/shell" if via == LB else self.targets[via] + path
        call = Call("fetch", via, trio.current_time())
        command = f"curl -sS -m 2 http://{self.rig.private.address}/"
        headers = {"Authorization": f"Bearer {fetch.token}"}
        got = await self._send(
            client, call, "POST", url, json={"command": command}, headers=headers
        )
        if got is not None and call.ok:
            result = got.json()
            whole = result.get("exitCode") == 0 and len(result["stdout"]) == len(FIRST + SECOND)
            call.ok, call.error = whole, "" if whole else json.dumps(result)[:200]
        return call

    # ---- the checks ------------------------------------------------------------------------

    def failures(self) -> list[Call]:
        return [c for c in self.calls if not c.ok]

    def classify(self, marked_down: float, served: float) -> dict[str, list[Call]]:
        """Every failed call in one class: ``in_flight`` (broken on the killed replica, or
        through HAProxy, when the kill came), ``to_the_dead`` (addressed to the killed replica
        after the kill), ``before_marked_down`` (broken through HAProxy, sent after the kill
        but before it marked the server down), ``tunnel_recovery`` (a fetch that devyard
        answered but the tunnel did not serve, sent before the tunnel served again),
        ``after`` (everything else: a loss)."""
        assert self.killed_at is not None
        killed_at = self.killed_at
        classes: dict[str, list[Call]] = {
            k: []
            for k in ("in_flight", "to_the_dead", "before_marked_down", "tunnel_recovery", "after")
        }
        for call in self.failures():
            if call.broken and call.via in (self.killed, LB) and call.in_flight_at(killed_at):
                classes["in_flight"].append(call)
            elif call.via == self.killed and call.sent >= killed_at:
                classes["to_the_dead"].append(call)
            elif call.broken and call.via == LB and killed_at <= call.sent < marked_down:
                classes["before_marked_down"].append(call)
            elif call.kind == "fetch" and not call.broken and call.sent < killed_at + served:
                classes["tunnel_recovery"].append(call)
            else:
                classes["after"].append(call)
        return classes

    def by_tag(self) -> dict[str, list[tuple[str, str, str]]]:
        """The stream's instances in the store, by tag: (id, state, "reason: message")."""
        rows = self.rig.query(
            "SELECT id, labels, state, coalesce(termination_reason || ': ', '')"
            " || coalesce(error_message, '') FROM instances WHERE labels LIKE %s",
            f'%"{LABEL}"%',
        )
        found: dict[str, list[tuple[str, str, str]]] = {}
        for instance_id, labels, state, message in rows:
            tag = json.loads(labels).get(LABEL)
            if tag is not None:
                found.setdefault(tag, []).append((str(instance_id), str(state), str(message)))
        return found

    async def check_durable(self, seconds: float) -> dict[str, object]:
        """Every write answered 2xx holds in the store; every write whose connection broke
        took effect whole or not at all; none is left half done. Returns counts."""
        creates = [c for c in self.calls if c.kind == "create"]
        deleted = {c.instance for c in self.calls if c.kind == "delete" and c.ok}
        # a delete whose connection broke may have taken effect (whole) or not
        maybe = {c.instance for c in self.calls if c.kind == "delete" and not c.ok}
        accepted = {c.tag: c.instance for c in creates if c.ok}
        unanswered = {c.tag for c in creates if not c.ok}
        found: dict[str, list[tuple[str, str, str]]] = {}

        async def settled() -> bool:
            found.clear()
            found.update(await trio.to_thread.run_sync(self.by_tag))
            return not any(s in _STUCK for rows in found.values() for _, s, _ in rows)

        try:
            await until(settled, seconds)
        except trio.TooSlowError:
            stuck = {t: r for t, r in found.items() if any(s in _STUCK for _, s, _ in r)}
            raise AssertionError(f"left half created after {seconds} s: {stuck}") from None
        twice = {t: rows for t, rows in found.items() if len(rows) > 1}
        assert not twice, f"one create made several instances: {twice}"
        for tag, instance_id in accepted.items():  # answered: there, whole, as answered
            assert tag in found, f"accepted create {tag} ({instance_id}) is not in the store"
            [(stored, state, message)] = found[tag]
            assert stored == instance_id, (tag, stored, instance_id)
            if instance_id in deleted:
                wanted = {("terminated", "UserRequested: ")}
            elif instance_id in maybe:
                wanted = {("ready", ""), ("terminated", "UserRequested: ")}
            else:
                wanted = {("ready", "")}
            assert (state, message) in wanted, (tag, instance_id, state, message)
        for tag in unanswered:  # broken: nothing, or a whole instance (ready, or ended)
            for instance_id, state, message in found.get(tag, []):
                assert state in ("ready", "terminated"), (tag, instance_id, state, message)
        # no reservation leaks: exactly one slot for each live instance, none for anything else
        # (an end its replica left half done is finished by a sweep, `UNFINISHED_S` after it)
        leaks: list[dict[str, str]] = []

        async def booked_as_live() -> bool:
            live = dict(
                await trio.to_thread.run_sync(
                    self.rig.query, "SELECT id, host_id FROM instances WHERE state <> 'terminated'"
                )
            )
            booked = dict(
                await trio.to_thread.run_sync(
                    self.rig.query, "SELECT holder_key, host_id FROM capacity_reservations"
                )
            )
            leaks[:] = [
                {k: h for k, h in booked.items() if k not in live},
                {k: h for k, h in live.items() if k not in booked},
            ]
            return booked == live

        try:
            await until(booked_as_live, UNFINISHED_S + 2 * POLL_S)
        except trio.TooSlowError:
            raise AssertionError(f"reservations (not live, not booked): {leaks}") from None
        took = Counter(f"{s} {m}".strip() for t in unanswered for _, s, m in found.get(t, []))
        return {
            "creates accepted": len(accepted),
            "deletes accepted": len(deleted),
            "broken creates": len(unanswered),
            "of which took effect": dict(took),
            "broken deletes": len(maybe),
        }

    def summary(self, classes: dict[str, list[Call]]) -> str:
        per: Counter[tuple[str, str]] = Counter()
        for call in self.calls:
            per[(call.via, "ok" if call.ok else "failed")] += 1
        lines = [
            f"load: {len(self.calls)} requests, {sum(c.ok for c in self.calls)} accepted; "
            + ", ".join(f"{k} {len(v)}" for k, v in classes.items()),
            "  per target: " + ", ".join(f"{v}/{s} {n}" for (v, s), n in sorted(per.items())),
        ]
        lines += [f"  {name}: {_show(calls)}" for name, calls in classes.items() if calls]
        return "\n".join(lines)


def _show(calls: Iterable[Call]) -> str:
    return "; ".join(f"{c.kind} via {c.via} {c.status or c.error[:60]}" for c in list(calls)[:6])
