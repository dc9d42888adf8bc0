"""`python -m bench sync`: bytes on the wire to sync a source tree to a build instance, for
the SDK's framing, the content-addressed mode and ``rsync`` (the baseline), on a synthetic
tree of thousands of files (issue 17).

The tree (``--files``, default 4000, seeded): source-like text files of 0.5 to 32 KiB in a
few hundred directories, plus a few binary files. Three steps per mode:

- ``first``: the tree to an empty workspace;
- ``unchanged``: the same tree again (the issue asks for under 1 % of the tree's bytes);
- ``one_file``: one 16 KiB file changed in a few bytes (it should cost about that file).

Modes, each counting the request bodies a client sends, compressed as it would send them:

- ``sdk``: ``POST /sync`` framed as ``@limrun/api``'s ``folder-sync.ts`` does (zstd body; the
  client keeps the last synced copies, so unchanged files go without a payload and a changed
  one as an xdelta3 patch against its last copy);
- ``cas``: ``POST /sync/missing`` (the manifest, zstd), ``PUT /blobs/{sha256}`` for each
  missing blob (zstd), ``POST /sync/commit`` naming the manifest by the ``manifestId`` the
  first call answered;
- ``rsync``: ``rsync -a --no-whole-file -z`` between two local directories, its ``Total bytes
  sent`` (Debian's rsync; its delta algorithm against the receiver's copy).

The host side is devyard's real code (``devyard.hostd.builds``: `Workspace` and `BlobStore`)
in this process, without the edge and the link: what is measured is what crosses the wire, and
every sync is checked to reproduce the tree. The last line printed is one JSON object:
``{"bench": "sync", "tree": {files, bytes, changed_file_bytes}, "results": {mode: {step:
{bytes, pct_of_tree, seconds}}}}``; ``one_file`` also has ``over_unchanged``, its bytes beyond
the unchanged step's.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import shutil
import struct
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

import trio
import zstandard

from devyard.hostd.builds.cas import BlobStore
from devyard.hostd.builds.sync import Workspace, parse_files

STEPS: Final = ("first", "unchanged", "one_file")
_WORDS: Final = (
    *("public", "private", "static", "final", "void", "class", "return", "import", "package"),
    *("new", "if", "else", "for", "while", "String", "int", "long", "boolean", "List", "Map"),
    *("Optional", "override", "this", "null", "true", "false", "throw", "try", "catch"),
)
_CHANGED: Final = "mod007/pkg3/Changed.java"


def make_tree(root: Path, files: int, seed: int) -> int:
    """The synthetic tree; its total bytes."""
    rng = random.Random(seed)
    total = 0
    for number in range(files):
        rel = f"mod{number % 40:03d}/pkg{number % 7}/File{number}.java"
        size = int(2 ** rng.uniform(9, 15))
        if number % 200 == 0:
            data = rng.randbytes(size)  # a few incompressible files (images, jars)
            rel = rel.replace(".java", ".bin")
        else:
            words = [rng.choice(_WORDS) for _ in range(size // 5)]
            data = " ".join(words).encode()[:size]
        total += _write(root / rel, data)
    total += _write(root / _CHANGED, _changed("original"))
    return total


def _changed(marker: str) -> bytes:
    line = b"    int value = 42; // a line of the file that changes in one place\n"
    return b"class Changed {\n" + line * 240 + f"// {marker}\n}}\n".encode()


def _write(path: Path, data: bytes) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return len(data)


def manifest(root: Path) -> tuple[list[dict[str, Any]], dict[str, Path]]:
    files, where = [], {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        data = path.read_bytes()
        files.append({"path": rel, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
        where[rel] = path
    return files, where


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data


def _zstd(data: bytes) -> bytes:
    return zstandard.ZstdCompressor(level=3).compress(data)


async def _tree_of(workspace: Workspace) -> dict[str, str]:
    def walk() -> dict[str, str]:
        root = workspace.root
        return {
            p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in root.rglob("*")
            if p.is_file()
        }

    return await trio.to_thread.run_sync(walk)


class SdkClient:
    """``folder-sync.ts``'s side: a cache of the last synced copies, full or xdelta3 payloads."""

    def __init__(self, cache: Path) -> None:
        self.cache = cache
        cache.mkdir(parents=True)
        self.synced: dict[str, str] = {}

    async def sync(self, root: Path, workspace: Workspace) -> int:
        files, where = manifest(root)
        payloads: list[dict[str, Any]] = []
        blobs: list[bytes] = []
        for entry in files:
            rel, digest = entry["path"], entry["sha256"]
            if self.synced.get(rel) == digest:
                continue
            data = where[rel].read_bytes()
            basis = self.cache / hashlib.sha256(rel.encode()).hexdigest()
            payload = {"path": rel, "targetSha256": digest}
            if rel in self.synced and basis.exists():
                patch = basis.with_suffix(".patch")
                await trio.run_process(
                    ["xdelta3", "-e", "-f", "-s", str(basis), str(where[rel]), str(patch)]
                )
                delta = patch.read_bytes()
                payload |= {"kind": "delta", "basisSha256": self.synced[rel]}
                payloads.append(payload | {"length": len(delta)})
                blobs.append(delta)
            else:
                payloads.append(payload | {"kind": "full", "length": len(data)})
                blobs.append(data)
            basis.write_bytes(data)
            self.synced[rel] = digest
        meta = json.dumps({"id": "bench", "rootName": "tree", "files": files, "payloads": payloads})
        raw = struct.pack(">I", len(meta)) + meta.encode() + b"".join(blobs)
        body = _zstd(raw)
        answer = await workspace.sync(_once(body), "zstd")
        if answer["ok"] is not True:
            raise RuntimeError(f"sdk sync failed: {answer}")
        return len(body)


async def cas_sync(root: Path, workspace: Workspace, blobs: BlobStore) -> int:
    files, where = manifest(root)
    body = _zstd(json.dumps({"files": files}).encode())
    sent = len(body)  # POST /sync/missing
    specs = list(
        parse_files(json.loads(zstandard.ZstdDecompressor().decompress(body))["files"]).values()
    )
    missing, complete = await workspace.missing(specs, blobs)
    assert complete
    by_sha = {f["sha256"]: where[f["path"]] for f in files}
    for digest in missing:  # PUT /blobs/{sha256}
        blob = _zstd(by_sha[digest].read_bytes())
        sent += len(blob)
        await blobs.put(digest, _once(blob), "zstd")
    sent += len(_zstd(json.dumps({"manifestId": "0" * 64}).encode()))  # POST /sync/commit
    answer = await workspace.commit_tree(specs, blobs)
    if answer["ok"] is not True:
        raise RuntimeError(f"cas commit failed: {answer}")
    return sent


async def rsync(root: Path, dest: Path) -> int:
    done = await trio.run_process(
        ["rsync", "-a", "--no-whole-file", "-z", "--stats", f"{root}/", f"{dest}/"],
        capture_stdout=True,
    )
    found = re.search(rb"Total bytes sent: ([\d,.]+)", done.stdout)
    if found is None:
        raise RuntimeError("rsync printed no 'Total bytes sent'")
    return int(re.sub(rb"[,.]", b"", found.group(1)))


async def measure(work: Path, files: int, seed: int) -> dict[str, Any]:
    source = work / "tree"
    total = make_tree(source, files, seed)
    results: dict[str, dict[str, Any]] = {}
    for mode in ("sdk", "cas", "rsync"):
        want, _ = manifest(source)
        rows: dict[str, Any] = {}
        workspace = Workspace(work / mode / "workspace", work / mode / "meta")
        workspace.create()
        blobs = BlobStore(work / mode / "blobs")
        blobs.create()
        client = SdkClient(work / mode / "client-cache")
        for step in STEPS:
            if step == "one_file":
                (source / _CHANGED).write_bytes(_changed("changed!"))
                want, _ = manifest(source)
            started = time.perf_counter()
            if mode == "sdk":
                sent = await client.sync(source, workspace)
            elif mode == "cas":
                sent = await cas_sync(source, workspace, blobs)
            else:
                sent = await rsync(source, workspace.root)
            seconds = time.perf_counter() - started
            if await _tree_of(workspace) != {f["path"]: f["sha256"] for f in want}:
                raise RuntimeError(f"{mode} {step}: the workspace differs from the tree")
            rows[step] = {
                "bytes": sent,
                "pct_of_tree": round(100 * sent / total, 3),
                "seconds": round(seconds, 3),
            }
        (source / _CHANGED).write_bytes(_changed("original"))
        rows["one_file"]["over_unchanged"] = rows["one_file"]["bytes"] - rows["unchanged"]["bytes"]
        results[mode] = rows
    changed_size = (source / _CHANGED).stat().st_size
    return {
        "bench": "sync",
        "tree": {"files": len(want), "bytes": total, "changed_file_bytes": changed_size},
        "results": results,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench sync", description=__doc__)
    parser.add_argument("--files", type=int, default=4000, help="files in the tree")
    parser.add_argument("--seed", type=int, default=17)
    args = parser.parse_args(argv)
    if args.files < 10:
        parser.error("--files must be at least 10")
    for tool in ("rsync", "xdelta3"):
        if shutil.which(tool) is None:
            print(f"bench sync: needs {tool} (scripts/deps installs it)", file=sys.stderr)
            return 2
    with tempfile.TemporaryDirectory(prefix="bench-sync-") as work:
        report = trio.run(measure, Path(work), args.files, args.seed)
    tree = report["tree"]
    print(f"tree: {tree['files']} files, {tree['bytes']} bytes")
    for mode, rows in report["results"].items():
        cells = "   ".join(
            f"{step} {row['bytes']:>10} B ({row['pct_of_tree']:7.3f} %) {row['seconds']:6.2f} s"
            for step, row in rows.items()
        )
        print(f"{mode:<6} {cells}")
    print(json.dumps(report))
    return 0
