"""The verbs of build instances (``devyard gradle|xcode``): docs/builds.md.

    devyard gradle sync ID DIR                 the folder to the instance's workspace
    devyard gradle build ID [TASK...]          a Gradle build; output streamed
    devyard gradle exec ID -- CMD ARGS...      a command in the sandbox; output streamed
    devyard gradle logs ID [--exec EXEC_ID]    the instance's build logs, or one build's text

``build`` and ``exec`` stream the build's events (stdout to stdout, stderr and task progress
to stderr; ``--json``: one JSON event a line) and exit with the build's own exit status; a
Ctrl-C cancels the build on the instance before the CLI exits 130. ``sync`` sends the whole
tree in full, gzip-compressed, in the SDK's framing (``folder-sync.ts``), streamed from disk;
the instance keeps what did not change and removes what the folder no longer has.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import struct
import sys
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TextIO

from .commands import EXIT_INTERRUPTED, CommandError, CommandExit, UsageError, _leaf
from .device_commands import instance_api

if TYPE_CHECKING:
    from .client import AsyncClient
    from .device import InstanceApi

__all__ = ["add_build_verbs", "tree_manifest"]

_CHUNK: Final = 1024 * 1024
_SKIPPED_DIRS: Final = frozenset({".git", ".gradle", ".kotlin", ".idea"})


def tree_manifest(root: Path) -> list[dict[str, Any]]:
    """The SDK's ``files`` list of *root* (blocking: run it in a thread); links are sent as
    links, never followed; ``.git`` and ``.gradle`` directories are not sent."""
    files: list[dict[str, Any]] = []
    for here, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_DIRS)
        base = Path(here)
        for name in sorted(names) + [d for d in dirs if (base / d).is_symlink()]:
            path = base / name
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                target = os.readlink(path)
                digest = hashlib.sha256(target.encode()).hexdigest()
                files.append({"path": rel, "size": len(target), "sha256": digest, "link": target})
                continue
            if not path.is_file():
                continue
            digest_of = hashlib.sha256()
            size = 0
            with path.open("rb") as source:
                while chunk := source.read(_CHUNK):
                    digest_of.update(chunk)
                    size += len(chunk)
            mode = path.stat().st_mode & 0o777
            files.append({"path": rel, "size": size, "sha256": digest_of.hexdigest(), "mode": mode})
    return files


async def _sync_body(root: Path, files: list[dict[str, Any]], only: set[str] | None) -> bytes:
    """The gzip-compressed body: header, manifest, then the full payloads in order."""
    import trio  # noqa: PLC0415

    payloads = [
        {"kind": "full", "path": f["path"], "targetSha256": f["sha256"], "length": f["size"]}
        for f in files
        if "link" not in f and (only is None or f["path"] in only)
    ]
    meta = {"id": f"cli-{os.getpid()}", "rootName": root.name, "files": files}
    head = json.dumps({**meta, "payloads": payloads}).encode()
    gzip = zlib.compressobj(6, zlib.DEFLATED, 31)
    parts = [gzip.compress(struct.pack(">I", len(head)) + head)]

    def compress(path: Path) -> bytes:
        out = []
        with path.open("rb") as source:
            while chunk := source.read(_CHUNK):
                out.append(gzip.compress(chunk))
        return b"".join(out)

    for payload in payloads:
        parts.append(await trio.to_thread.run_sync(compress, root / payload["path"]))
    parts.append(gzip.flush())
    return b"".join(parts)


async def _sync(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    import trio  # noqa: PLC0415

    root = Path(await trio.Path(args.dir).resolve())
    if not await trio.Path(root).is_dir():
        raise UsageError(f"{args.dir} is not a directory")
    files = await trio.to_thread.run_sync(tree_manifest, root)
    async with await instance_api(client, args) as api:
        answer = await api.sync(await _sync_body(root, files, None), encoding="gzip")
        if not answer.get("ok", True) and answer.get("needFull"):
            again = set(answer["needFull"])
            answer = await api.sync(await _sync_body(root, files, again), encoding="gzip")
    if args.json:
        json.dump(answer, out, indent=2)
        out.write("\n")
        return
    out.write(
        f"synced {root.name}: {answer.get('files', len(files))} files, "
        f"{answer.get('written', 0)} written, {answer.get('deleted', 0)} deleted "
        f"({answer.get('syncDurationMs', 0)} ms)\n"
    )


def _exit_status(data: str) -> int:
    try:
        code = int(data.strip())
    except ValueError:
        return 1
    if code < 0:  # cancelled
        return EXIT_INTERRUPTED
    return code if code < 256 else 1


async def _stream(api: InstanceApi, exec_id: str, args: argparse.Namespace, out: TextIO) -> int:
    """Print the build's events until its exit code; that code."""
    import trio  # noqa: PLC0415

    code = 1
    try:
        async for event in api.exec_events(exec_id):
            if args.json:
                record = {"id": event.id, "type": event.type, "data": event.data}
                out.write(json.dumps(record, separators=(",", ":")) + "\n")
                out.flush()
            elif event.type == "stdout":
                out.write(event.data + "\n")
                out.flush()
            elif event.type == "stderr":
                print(event.data, file=sys.stderr, flush=True)
            elif event.type == "progress":
                print(f"> {_progress(event.data)}", file=sys.stderr, flush=True)
            elif event.type == "artifact":
                print(f"artifact {_progress(event.data)}", file=sys.stderr, flush=True)
            if event.type == "exitCode":
                code = _exit_status(event.data)
    except KeyboardInterrupt:
        with trio.CancelScope(shield=True), trio.move_on_after(10):
            await api.cancel(exec_id)
            print(f"cancelled {exec_id}", file=sys.stderr, flush=True)
        raise
    return code


def _progress(data: str) -> str:
    try:
        value = json.loads(data)
    except ValueError:
        return data
    if isinstance(value, dict):
        return " ".join(str(v) for v in value.values())
    return data


async def _start_and_stream(
    client: AsyncClient, args: argparse.Namespace, out: TextIO, request: dict[str, Any]
) -> None:
    if args.timeout is not None:
        request["timeoutSeconds"] = args.timeout
    if args.env:
        request["env"] = list(args.env)
    async with await instance_api(client, args) as api:
        exec_id = await api.exec(request)
        print(f"exec {exec_id}", file=sys.stderr, flush=True)
        code = await _stream(api, exec_id, args, out)
    if code:
        raise CommandExit(code)


async def _build(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    if args.platform == "xcode":
        request: dict[str, Any] = {"command": "xcodebuild"}
    else:
        request = {"command": "gradlebuild"}
        if getattr(args, "tasks", None):
            request["tasks"] = list(args.tasks)
    if args.project_path:
        request["projectPath"] = args.project_path
    if args.artifact:
        request["artifacts"] = list(args.artifact)
    await _start_and_stream(client, args, out, request)


async def _exec(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    words = list(args.command)
    words = words[1:] if words[:1] == ["--"] else words
    if not words:
        raise UsageError("exec needs a command: devyard gradle exec ID -- ls -la")
    line = words[0] if len(words) == 1 else shlex.join(words)
    request: dict[str, Any] = {"command": "run", "commandLine": line}
    if args.cwd:
        request["cwd"] = args.cwd
    await _start_and_stream(client, args, out, request)


async def _logs(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    from .output import print_table  # noqa: PLC0415

    logs = await client.build_logs(str(args.id))
    if args.exec_id:
        chosen = [log for log in logs if log.get("id") == args.exec_id]
        if not chosen or not chosen[0].get("downloadUrl"):
            raise CommandError(f"no build log {args.exec_id} on {args.id}", 3)
        url = str(chosen[0]["downloadUrl"])
        if url.startswith("/"):
            url = client.base_url + url

        async def sink(chunk: bytes) -> None:
            out.write(chunk.decode(errors="replace"))

        await client.download_signed(url, sink)
        out.flush()
        return
    if args.json:
        json.dump(logs, out, indent=2)
        out.write("\n")
        return
    rows = [
        (
            log.get("id"),
            log.get("status"),
            log.get("command"),
            log.get("exitCode"),
            log.get("startedAt"),
            log.get("buildDurationMs"),
        )
        for log in logs
    ]
    print_table(("EXEC", "STATUS", "COMMAND", "EXIT", "STARTED", "MS"), rows, out)


def _exec_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--timeout", type=int, metavar="SECONDS", help="default 3600")
    parser.add_argument(
        "--env", action="append", default=[], metavar="NAME=VALUE", help="repeatable"
    )


def add_build_verbs(
    verbs: argparse._SubParsersAction[argparse.ArgumentParser],
    platform: str,
    common: argparse.ArgumentParser,
) -> None:
    """Declare ``sync``, ``build``, ``exec`` and ``logs`` under ``devyard PLATFORM``."""
    sync = _leaf(verbs, "sync", _sync, "send a folder to the instance's workspace", common)
    sync.add_argument("id")
    sync.add_argument("dir", metavar="DIR")
    build = _leaf(verbs, "build", _build, "build; exits with the build's status", common)
    build.add_argument("id")
    if platform == "gradle":
        build.add_argument("tasks", nargs="*", metavar="TASK", help="default: build")
    build.add_argument("--project-path", metavar="PATH", help="inside the workspace")
    build.add_argument(
        "--artifact", action="append", default=[], metavar="GLOB", help="files to keep"
    )
    _exec_options(build)
    run = _leaf(verbs, "exec", _exec, "run a command in the sandbox; exits with its status", common)
    run.add_argument("id")
    run.add_argument("--cwd", metavar="PATH", help="inside the workspace")
    _exec_options(run)
    run.add_argument("command", nargs=argparse.REMAINDER, help="the rest; options go before ID")
    logs = _leaf(verbs, "logs", _logs, "list build logs, or print one (--exec)", common)
    logs.add_argument("id")
    logs.add_argument("--exec", dest="exec_id", metavar="EXEC_ID", help="print this build's log")
