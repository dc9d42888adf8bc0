"""``POST {apiUrl}/sync`` as the SDK frames it, against a Gradle instance of `devyard up` plus a
gradle host: checked paths (400, nothing written), deltas (xdelta3), ``needFull``, gzip and
zstd bodies, deletions, and the paths a sync never touches."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import httpx
import trio

from ._stack import exec_id_of, full, gradle_stack, instance_client, read_events, sync_body


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _file(path: str, data: bytes, mode: int = 0o644) -> dict[str, Any]:
    return {
        "path": path,
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "mode": mode,
    }


async def _tree(api: httpx.AsyncClient) -> dict[str, str]:
    """What the workspace holds: each file with its sha256 (links as ``-> target``)."""
    line = "find . -type f -exec sha256sum {} + ; find . -type l -printf '%p -> %l\\n'"
    run = exec_id_of(await api.post("exec", json={"command": "run", "commandLine": line}))
    _, events, _ = await read_events(api, run)
    assert events[-1].data == "0", events
    tree = {}
    for event in events:
        if event.type != "stdout":
            continue
        if " -> " in event.data:
            path, _, target = event.data.partition(" -> ")
            tree[path.removeprefix("./")] = f"-> {target}"
        else:
            digest, _, path = event.data.partition("  ")
            tree[path.removeprefix("./")] = digest
    return tree


async def _post(
    api: httpx.AsyncClient, files: list[dict[str, Any]], payloads: Any, **kw: Any
) -> httpx.Response:
    body, headers = sync_body(files, payloads, **kw)
    return await api.post("sync", content=body, headers=headers)


async def test_sync_checks_paths_applies_deltas_and_asks_for_what_it_lacks(tmp_path: Path) -> None:
    a, b = b"first file\n" * 100, b"second\n"
    big = bytes(range(256)) * 1024  # a delta's basis
    fa, fb, fbig = _file("src/a.txt", a), _file("b.txt", b, 0o755), _file("data/big.bin", big)
    async with gradle_stack(tmp_path) as stack, stack.api() as http:
        instance = await stack.create_gradle(http)
        async with instance_client(instance) as api:
            # a clean first sync, zstd
            first = await _post(
                api, [fa, fb, fbig], [full(fa, a), full(fb, b), full(fbig, big)], encoding="zstd"
            )
            assert first.status_code == 200, first.text
            assert first.json()["ok"] is True
            assert await _tree(api) == {
                "src/a.txt": sha(a),
                "b.txt": sha(b),
                "data/big.bin": sha(big),
            }

            # every bad path is a 400 and writes nothing, even next to good entries
            evil = b"owned\n"
            for bad in ("../escape.txt", "/etc/escape.txt", "src/../../escape.txt", "a//b", "a\\b"):
                entry = _file(bad, evil)
                refused = await _post(api, [fa, fb, fbig, entry], [full(entry, evil)])
                assert refused.status_code == 400, (bad, refused.text)
                assert refused.json()["reason"] == "bad_request"
            link = {"path": "out-link", "size": 4, "sha256": sha(b"../x"), "link": "../x"}
            refused = await _post(api, [fa, fb, fbig, link], [])
            assert refused.status_code == 400 and "outside the root" in refused.json()["message"]
            absolute = {"path": "abs-link", "size": 4, "sha256": sha(b"/etc"), "link": "/etc"}
            assert (await _post(api, [absolute], [])).status_code == 400
            new = _file("new.txt", b"new\n")
            lying = await _post(api, [fa, fb, fbig, new], [({**full(new, b"new\n")[0]}, b"NEW\n")])
            assert lying.status_code == 400, "a payload must hash to its targetSha256"
            assert "new.txt" not in await _tree(api), "a refused sync writes nothing"
            assert not list(stack.host_data.rglob("escape.txt"))

            # a delta against the workspace's copy (the SDK's xdelta3 VCDIFF), gzip body
            changed = big[:5000] + b"a change" + big[5000:]
            basis, target, patch = tmp_path / "basis", tmp_path / "target", tmp_path / "patch"
            basis.write_bytes(big)
            target.write_bytes(changed)
            await trio.run_process(
                ["xdelta3", "-e", "-f", "-s", str(basis), str(target), str(patch)], check=True
            )
            fchanged = _file("data/big.bin", changed)
            delta = {
                "kind": "delta",
                "path": "data/big.bin",
                "basisSha256": sha(big),
                "targetSha256": sha(changed),
                "length": patch.stat().st_size,
            }
            assert patch.stat().st_size < len(changed) // 10
            applied = await _post(
                api, [fa, fb, fchanged], [(delta, patch.read_bytes())], encoding="gzip"
            )
            assert applied.status_code == 200 and applied.json()["ok"] is True, applied.text

            # a basis the workspace does not have, and a file it lacks without a payload:
            # needFull for both, the rest applied
            lacking = _file("lacking.txt", b"never sent\n")
            stale = {**delta, "basisSha256": sha(b"another basis")}
            again = await _post(api, [fa, fb, fchanged, lacking], [(stale, patch.read_bytes())])
            assert again.status_code == 200
            assert again.json()["ok"] is False
            assert again.json()["needFull"] == ["data/big.bin", "lacking.txt"]
            retried = await _post(
                api,
                [fa, fb, fchanged, lacking],
                [full(fchanged, changed), full(lacking, b"never sent\n")],
            )
            assert retried.json()["ok"] is True

            # what the manifest no longer lists goes; ignored paths are neither written nor
            # deleted; an in-root link is made
            ignored_out = "mkdir -p out app/build && echo kept > out/x && echo kept > app/build/y"
            made = exec_id_of(
                await api.post("exec", json={"command": "run", "commandLine": ignored_out})
            )
            assert (await read_events(api, made))[1][-1].data == "0"
            props = _file("local.properties", b"sdk.dir=/secret\n")
            ok_link = {"path": "src/link", "size": 5, "sha256": sha(b"a.txt"), "link": "a.txt"}
            gitignore = _file(".gitignore", b"out/\n")
            last = await _post(
                api,
                [fa, props, ok_link, gitignore],
                [full(props, b"sdk.dir=/secret\n"), full(gitignore, b"out/\n")],
            )
            assert last.json()["ok"] is True, last.text
            tree = await _tree(api)
            assert set(tree) == {"src/a.txt", "src/link", ".gitignore", "out/x", "app/build/y"}
            assert tree["src/link"] == "-> a.txt"

            # a mode-only change (chmod +x) reaches the workspace without a payload
            executable = {**fa, "mode": 0o755}
            chmod = await _post(api, [executable, props, ok_link, gitignore], [])
            assert chmod.json()["ok"] is True, chmod.text
            line = "stat -c %a src/a.txt"
            run = exec_id_of(await api.post("exec", json={"command": "run", "commandLine": line}))
            assert (await read_events(api, run))[1][1].data == "755"
