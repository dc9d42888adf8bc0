"""The commercial SDK (`@limrun/api` from npm, pinned in tests/node/builds) syncs a folder to a
devyard Gradle instance with its own folder-sync client (gzip bodies on Node 20, xdelta3
deltas from its WASM encoder, its basis cache) and runs a command with its exec client."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import trio

from ._stack import gradle_stack

NODE_DIR = Path(__file__).parent.parent / "node" / "builds"


async def test_the_sdk_syncs_with_deltas_and_runs_a_command(tmp_path: Path) -> None:
    node = shutil.which("node")
    if node is None or not (NODE_DIR / "node_modules" / "@limrun" / "api").is_dir():
        pytest.skip("node or tests/node/builds/node_modules is missing (scripts/node-deps)")
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / "greeting.txt").write_text("hello from the SDK\n")
    data = bytes(range(256)) * 1024  # past the SDK's 64 KiB delta threshold
    (folder / "data.bin").write_bytes(data)
    (folder / "local.properties").write_text("sdk.dir=/nowhere\n")
    async with gradle_stack(tmp_path) as stack, stack.api() as http:
        instance = await stack.create_gradle(http)
        status = instance["status"]
        with trio.fail_after(120):
            done = await trio.run_process(
                [
                    node,
                    "roundtrip.cjs",
                    status["apiUrl"],
                    status["token"],
                    str(folder),
                    str(tmp_path / "cache"),
                ],
                cwd=NODE_DIR,
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
        assert done.returncode == 0, done.stderr.decode()
        result = json.loads(done.stdout.decode().strip().splitlines()[-1])
    first, unchanged, delta = result["bytes"]
    assert first == len(data) + len("hello from the SDK\n")
    assert unchanged == 0, "an unchanged tree sends nothing"
    assert 0 < delta < len(data) // 10, "a small change in a big file goes as a delta"
    changed = bytearray(data)
    changed[1000:1008] = b"changed!"
    assert result["stdout"][0].split()[0] == hashlib.sha256(changed).hexdigest()
    assert result["stdout"][1] == "hello from the SDK"
    assert (result["exitCode"], result["status"]) == (7, "FAILED")
