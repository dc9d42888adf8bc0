"""``/exec`` on a Gradle instance (`devyard up` plus a gradle host), with ``run`` commands:
resuming the event stream, cancel (measured), the sandbox (no network, no host files), the
instance's end killing its builds, and what a Linux host refuses."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
import trio

from tests.polling import eventually

from ._stack import exec_id_of, gradle_stack, instance_client, read_events


def _processes_with(marker: str) -> list[int]:
    """The host's processes running ``sleep`` with an argument starting with *marker* (not
    the shells and the bwrap whose command lines mention it)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                if handle.read().startswith(b"sleep\x00" + marker.encode()):
                    found.append(int(entry))
        except OSError:
            continue
    return found


# Cutting the event stream mid-way abandons httpcore's body iterator to the GC: its
# ResourceWarning is expected (as in tests/server/gateway/test_streams.py).
@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_events_resume_cancel_kills_the_tree_and_the_sandbox_holds(tmp_path: Path) -> None:
    async with gradle_stack(tmp_path) as stack, stack.api() as http:
        instance = await stack.create_gradle(http)
        async with instance_client(instance) as api:
            # -- resume: cut after 10 events, go on from the last id seen --------------------
            line = "for i in $(seq 1 60); do echo out $i; echo err $i >&2; sleep 0.02; done; exit 3"
            run = exec_id_of(await api.post("exec", json={"command": "run", "commandLine": line}))
            _, head, retries = await read_events(api, run, stop_after=10)
            assert retries and head[-1].id == 10
            _, tail, _ = await read_events(api, run, last_event_id=head[-1].id)
            _, whole, _ = await read_events(api, run)  # the whole stream, replayed from 0
            assert head + tail == whole
            assert [e.id for e in whole] == list(range(1, len(whole) + 1))
            stdout = "".join(e.data + "\n" for e in head + tail if e.type == "stdout")
            assert stdout == "".join(f"out {i}\n" for i in range(1, 61))
            assert [e.data for e in whole if e.type == "exitCode"] == ["3"]
            status, after, _ = await read_events(api, run, last_event_id=whole[-1].id)
            assert (status, after) == (204, []), (
                "after the last event the stream is closed for good"
            )
            described = (await api.get(f"exec/{run}")).json()
            assert described["status"] == "FAILED" and described["exitCode"] == 3

            # -- cancel kills the whole tree, also what left the process group ----------------
            tree = "sleep 4242 & (setsid sleep 4243 &); sh -c 'sleep 4244' & echo started; wait"
            run = exec_id_of(await api.post("exec", json={"command": "run", "commandLine": tree}))
            _, started, _ = await read_events(api, run, stop_after=2)
            assert started[-1].data == "started"
            await eventually(lambda: len(_processes_with("424")) == 3, 10)
            before = trio.current_time()
            cancelled = await api.post(f"exec/{run}/cancel")
            assert cancelled.status_code == 200, cancelled.text
            await eventually(lambda: not _processes_with("424"), 5, poll=0.005)
            took = trio.current_time() - before
            assert took < 1.0, f"cancel took {took:.3f} s"
            assert cancelled.json()["status"] == "CANCELLED"
            assert cancelled.json()["cancelKillMs"] < 1000
            _, events, _ = await read_events(api, run)
            assert [e.data for e in events if e.type == "exitCode"] == ["-1"]

            # -- the sandbox: no network, no host files, a private /tmp ------------------------
            listener = socket.create_server(("127.0.0.1", 0))
            port = listener.getsockname()[1]
            probe = (
                "python3 -c \"import socket; socket.create_connection(('127.0.0.1', "
                f'{port}), timeout=3)" 2>&1 | tail -1; '
                "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 80), "
                'timeout=3)" 2>&1 | tail -1; '
                f"ls {stack.host_data} 2>&1; ls {stack.data} 2>&1; ls /tmp | wc -l"
            )
            run = exec_id_of(await api.post("exec", json={"command": "run", "commandLine": probe}))
            _, events, _ = await read_events(api, run)
            listener.close()
            out = [e.data for e in events if e.type == "stdout"]
            assert "ConnectionRefusedError" in out[0], out  # the host's loopback is not there
            assert "Network is unreachable" in out[1], out
            assert "No such file or directory" in out[2] and "No such file or directory" in out[3]
            assert out[4] == "0", "a private, empty /tmp"
            refused = await api.post(
                "exec", json={"command": "run", "commandLine": "true", "network": "open"}
            )
            assert refused.status_code == 400 and "network" in refused.json()["message"]

            # -- what a Linux host refuses, and what does not exist --------------------------
            xcode = await api.post(
                "exec", json={"command": "xcodebuild", "xcodebuild": {"scheme": "App"}}
            )
            assert xcode.status_code == 400, xcode.text
            assert xcode.json()["reason"] == "unsupported" and "macOS" in xcode.json()["message"]
            assert (await api.get("exec/build-1/events")).status_code == 404
            assert (await api.post("exec", content=b"[1]")).status_code == 400

            # -- one exec at a time; deleting the instance kills the running one --------------
            run = exec_id_of(
                await api.post("exec", json={"command": "run", "commandLine": "sleep 4245"})
            )
            busy = await api.post("exec", json={"command": "run", "commandLine": "true"})
            assert busy.status_code == 409
            await eventually(lambda: bool(_processes_with("4245")), 10)
            listed = (await api.get("exec")).json()["items"]
            assert [json.dumps(i["status"]) for i in listed][-1] == '"RUNNING"'
        instance_id = instance["metadata"]["id"]
        assert (await http.delete(f"/v1/gradle_instances/{instance_id}")).status_code == 200
        await eventually(lambda: not _processes_with("4245"), 15)
        await eventually(lambda: not (stack.host_data / "instances" / instance_id).exists(), 15)
