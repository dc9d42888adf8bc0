"""The device verbs of ``devyard android|ios``: drive an instance through its own API.

    devyard android screenshot ID -o shot.png | tap ID X Y | swipe ID X1 Y1 X2 Y2
    devyard android type ID TEXT | key ID home | open-url ID URL
    devyard android install ID FILE | apps ID | launch ID APP
    devyard android shell ID -- CMD...      (exits with the command's status)
    devyard android push ID LOCAL REMOTE | pull ID REMOTE [LOCAL|-]
    devyard android logs ID [-f] | watch ID | connect ID   (connect: Android, adb)

Each looks the instance up (its ``apiUrl`` and instance token) and calls
``client.device.InstanceApi``. ``install`` first keeps the file as an asset (uploaded only
when the server's md5 differs, with a progress bar on a terminal), then streams it to the
device: hostd fetches URLs through the device's network policy, which refuses the loopback
and private addresses a self-hosted server often has, so the CLI carries the bytes itself.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TextIO

from .commands import EXIT_CONFLICT, CommandError, CommandExit, UsageError, _leaf

if TYPE_CHECKING:
    from .client import AsyncClient
    from .device import InstanceApi

__all__ = ["KEYS", "add_device_verbs"]

KEYS: Final = (
    "home",
    "back",
    "app_switch",
    "enter",
    "delete",
    "tab",
    "escape",
    "paste",
    "power",
    "volume_up",
    "volume_down",
    "menu",
)
_LOG_POLL_S: Final = 1.0
_CHUNK: Final = 256 * 1024


async def instance_api(client: AsyncClient, args: argparse.Namespace) -> InstanceApi:
    """The instance's API, or exit 5 when it is not ready."""
    from .device import InstanceApi, NotReadyError  # noqa: PLC0415

    instance = await client.get_instance(str(args.id), platform=args.platform)
    try:
        return InstanceApi.of(instance, verify=client.tls_context)
    except NotReadyError as exc:
        raise CommandError(str(exc), EXIT_CONFLICT) from None


def _said(args: argparse.Namespace, out: TextIO, text: str, value: object = None) -> None:
    if args.json:
        json.dump({"ok": True} if value is None else value, out, indent=2)
        out.write("\n")
    else:
        out.write(text + "\n")


async def _screenshot(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    import trio  # noqa: PLC0415

    async with await instance_api(client, args) as api:
        png = await api.screenshot()
    if args.output == "-":
        sys.stdout.buffer.write(png)
        sys.stdout.buffer.flush()
        return
    target = Path(args.output or f"{args.id}.png")
    await trio.Path(target).write_bytes(png)
    _said(args, out, f"{target} ({len(png)} bytes)", {"path": str(target), "bytes": len(png)})


async def _tap(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    async with await instance_api(client, args) as api:
        await api.tap(args.x, args.y)
    _said(args, out, "tapped")


async def _swipe(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    async with await instance_api(client, args) as api:
        await api.swipe(args.x1, args.y1, args.x2, args.y2, duration_ms=args.duration_ms)
    _said(args, out, "swiped")


async def _type(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    async with await instance_api(client, args) as api:
        await api.type_text(args.text)
    _said(args, out, "typed")


async def _key(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    async with await instance_api(client, args) as api:
        await api.key(args.key)
    _said(args, out, f"pressed {args.key}")


async def _open_url(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    async with await instance_api(client, args) as api:
        await api.open_url(args.url)
    _said(args, out, f"opened {args.url}")


async def _install(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    import trio  # noqa: PLC0415

    from .asset_commands import _file_chunks, _Progress, file_md5  # noqa: PLC0415

    path = Path(args.file)
    try:
        md5, size = await trio.to_thread.run_sync(file_md5, path)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from exc
    async with await instance_api(client, args) as api:
        if not args.no_asset:
            asset = await client.upsert_asset(path.name, os=args.platform)
            if asset.md5 != md5 and asset.signed_upload_url is not None:
                kept = _Progress(f"keeping {path.name} as an asset", size, sys.stderr)
                await client.upload_signed(asset.signed_upload_url, _file_chunks(path, kept), size)
                kept.finish()
        sent = _Progress(f"installing {path.name}", size, sys.stderr)
        app = await api.install(_file_chunks(path, sent), suffix=path.suffix, size=size)
        sent.finish()
    _said(args, out, f"installed {app.get('id') or path.name}", app)


async def _apps(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    from .output import print_table  # noqa: PLC0415

    async with await instance_api(client, args) as api:
        apps = await api.apps()
    if args.json:
        json.dump(apps, out, indent=2)
        out.write("\n")
        return
    rows = [(a.get("id"), a.get("label"), a.get("version")) for a in apps]
    print_table(("APP", "LABEL", "VERSION"), rows, out)


async def _launch(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    async with await instance_api(client, args) as api:
        await api.launch(args.app)
    _said(args, out, f"launched {args.app}")


async def _shell(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    words = list(args.command)
    command = " ".join(words[1:] if words[:1] == ["--"] else words)
    if not command:
        raise UsageError("shell needs a command: devyard android shell ID -- ls /sdcard")
    async with await instance_api(client, args) as api:
        result = await api.shell(command)
    if args.json:
        json.dump(result, out, indent=2)
        out.write("\n")
    else:
        out.write(result.get("stdout", ""))
        out.flush()
        sys.stderr.write(result.get("stderr", ""))
    code = int(result.get("exitCode", 0))  # the exit code is the command's, --json or not
    if code:
        raise CommandExit(code if 0 < code < 256 else 1)


async def _push(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    import trio  # noqa: PLC0415

    local = Path(args.local)
    if not await trio.Path(local).is_file():
        raise UsageError(f"{local} is not a file")

    async def chunks() -> AsyncIterator[bytes]:
        async with await trio.open_file(local, "rb") as source:
            while chunk := await source.read(_CHUNK):
                yield chunk

    async with await instance_api(client, args) as api:
        written = await api.push(args.remote, chunks())
    _said(args, out, f"{local} -> {args.remote} ({written.get('size')} bytes)", written)


async def _pull(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    import trio  # noqa: PLC0415

    target = args.local or Path(args.remote).name or "pulled"
    size = 0
    async with await instance_api(client, args) as api:
        if target == "-":

            async def to_stdout(chunk: bytes) -> None:
                sys.stdout.buffer.write(chunk)

            try:
                await api.pull(args.remote, to_stdout)
            except IsADirectoryError:
                raise UsageError(f"{args.remote} is a directory") from None
            sys.stdout.buffer.flush()
            return
        async with await trio.open_file(target, "wb") as sink:

            async def to_file(chunk: bytes) -> None:
                nonlocal size
                size += len(chunk)
                await sink.write(chunk)

            try:
                await api.pull(args.remote, to_file)
            except Exception as exc:
                await trio.Path(target).unlink(missing_ok=True)  # no half or empty file
                if isinstance(exc, IsADirectoryError):
                    raise UsageError(f"{args.remote} is a directory") from None
                raise
    _said(args, out, f"{args.remote} -> {target} ({size} bytes)", {"path": target, "bytes": size})


def _log_line(entry: dict[str, Any]) -> str:
    return f"{entry.get('time', '')} {entry.get('level', '')} {entry.get('tag', '')}: " + str(
        entry.get("message", "")
    )


async def _logs(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    import trio  # noqa: PLC0415

    after = 0
    async with await instance_api(client, args) as api:
        while True:
            for entry in await api.logs(after=after):
                after = max(after, int(entry.get("seq", after)))
                if args.json:  # one JSON document a line: a stream
                    out.write(json.dumps(entry, separators=(",", ":")) + "\n")
                else:
                    out.write(_log_line(entry) + "\n")
            out.flush()
            if not args.follow:
                return
            await trio.sleep(_LOG_POLL_S)


async def _watch(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    import trio  # noqa: PLC0415

    instance = await client.get_instance(str(args.id), platform=args.platform)
    url = instance.status.signed_stream_url
    if not url:
        raise CommandError(f"{args.id} has no stream URL (it is {instance.status.state.value})")
    if args.json:
        json.dump({"url": url}, out)
        out.write("\n")
        return
    opened = False
    if not args.no_browser and sys.stdout.isatty():
        import webbrowser  # noqa: PLC0415

        opened = await trio.to_thread.run_sync(webbrowser.open, url)
    note = "opened in your browser" if opened else "open this URL in a browser"
    print(f"{args.id}: {note} (it carries a view token: do not share it)", file=sys.stderr)
    out.write(url + "\n")


def add_device_verbs(
    verbs: argparse._SubParsersAction[argparse.ArgumentParser],
    platform: str,
    common: argparse.ArgumentParser,
) -> None:
    """Declare the device verbs under ``devyard PLATFORM``."""
    shot = _leaf(verbs, "screenshot", _screenshot, "save a PNG screenshot", common)
    shot.add_argument("id")
    shot.add_argument("-o", "--output", metavar="FILE", help="default ID.png; - is stdout")
    tap = _leaf(verbs, "tap", _tap, "tap at X Y (pixels of the screen)", common)
    tap.add_argument("id")
    tap.add_argument("x", type=float)
    tap.add_argument("y", type=float)
    swipe = _leaf(verbs, "swipe", _swipe, "swipe from X1 Y1 to X2 Y2 (pixels)", common)
    swipe.add_argument("id")
    for name in ("x1", "y1", "x2", "y2"):
        swipe.add_argument(name, type=float)
    swipe.add_argument("--duration-ms", type=float, default=300.0, metavar="MS")
    typing = _leaf(verbs, "type", _type, "type TEXT into the focused field", common)
    typing.add_argument("id")
    typing.add_argument("text")
    key = _leaf(verbs, "key", _key, "press a key (home, back, enter...)", common)
    key.add_argument("id")
    key.add_argument("key", choices=KEYS)
    open_url = _leaf(verbs, "open-url", _open_url, "open a URL on the device", common)
    open_url.add_argument("id")
    open_url.add_argument("url")
    install = _leaf(
        verbs, "install", _install, "install an app file (kept as an asset first)", common
    )
    install.add_argument("id")
    install.add_argument("file", help="an .apk, .ipa or .app.zip")
    install.add_argument("--no-asset", action="store_true", help="do not keep it as an asset")
    _leaf(verbs, "apps", _apps, "list installed apps", common).add_argument("id")
    launch = _leaf(verbs, "launch", _launch, "launch an installed app", common)
    launch.add_argument("id")
    launch.add_argument("app", help="package name or bundle id")
    if platform == "android":
        shell = _leaf(verbs, "shell", _shell, "run a shell command; exits with its status", common)
        shell.add_argument("id")
        shell.add_argument(
            "command", nargs=argparse.REMAINDER, help="the rest; options go before ID"
        )
    push = _leaf(verbs, "push", _push, "copy a local file onto the device", common)
    push.add_argument("id")
    push.add_argument("local", metavar="LOCAL")
    push.add_argument("remote", metavar="REMOTE", help="a path on the device")
    pull = _leaf(verbs, "pull", _pull, "copy a file from the device", common)
    pull.add_argument("id")
    pull.add_argument("remote", metavar="REMOTE")
    pull.add_argument("local", metavar="LOCAL", nargs="?", help="default: its name; - is stdout")
    logs = _leaf(verbs, "logs", _logs, "print the device log (-f: follow it)", common)
    logs.add_argument("id")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing new entries")
    watch = _leaf(verbs, "watch", _watch, "open the live screen in a browser", common)
    watch.add_argument("id")
    watch.add_argument("--no-browser", action="store_true", help="only print the URL")
    if platform == "android":
        from .adb_commands import add_connect  # noqa: PLC0415

        add_connect(verbs, common)
