"""``devyard asset push|pull|list|delete``: files to and from the organization's assets.

``push`` follows spec 2.4: get-or-create the asset by name, then upload only when the server's
md5 is missing or differs from the local file's, streaming the file (1 MiB reads) with a
progress line on stderr. ``pull`` streams into a temporary file beside the target, checks the
md5 and renames it into place, so an interrupted pull never leaves a half-written FILE.
Commands accept an asset id (``asset_...``) or a name wherever they take ASSET.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Final, TextIO

from ._errors import DevyardError
from .commands import _common, _leaf

if TYPE_CHECKING:
    from .client import AsyncClient
    from .models import Asset

__all__ = ["AssetCommandError", "add_commands", "file_md5"]

CHUNK: Final = 1024 * 1024
_PROGRESS_EVERY: Final = 0.2  # seconds between progress lines


class AssetCommandError(DevyardError):
    """A push or pull that cannot go on; printed as ``devyard: error: ...``."""


def file_md5(path: Path) -> tuple[str, int]:
    """MD5 and size of a file, read in chunks (blocking; run it in a thread)."""
    digest = hashlib.md5(usedforsecurity=False)
    size = 0
    with path.open("rb") as file:
        while chunk := file.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


class _Progress:
    """One line on stderr, rewritten in place on a terminal, printed once at the end otherwise."""

    def __init__(self, label: str, total: int, err: TextIO) -> None:
        self.label, self.total, self.err = label, total, err
        self.done = 0
        self._last = 0.0
        self._tty = err.isatty()

    def advance(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if self._tty and now - self._last >= _PROGRESS_EVERY:
            self._last = now
            self._show("\r")

    def finish(self) -> None:
        self._show("\r" if self._tty else "")
        self.err.write("\n")
        self.err.flush()

    def _show(self, prefix: str) -> None:
        percent = 100 * self.done // self.total if self.total else 100
        mib = self.done / 2**20
        self.err.write(
            f"{prefix}{self.label}: {mib:.1f} MiB of {self.total / 2**20:.1f} ({percent}%)"
        )
        self.err.flush()


async def _file_chunks(path: Path, progress: _Progress) -> AsyncIterator[bytes]:
    import trio  # noqa: PLC0415 - loaded only when a command runs

    async with await trio.open_file(path, "rb") as file:
        while chunk := await file.read(CHUNK):
            progress.advance(len(chunk))
            yield chunk


async def _find(client: AsyncClient, ref: str, *, download_url: bool = False) -> Asset:
    from ._errors import NotFoundError  # noqa: PLC0415

    if ref.startswith("asset_"):
        return await client.get_asset(ref, include_download_url=download_url)
    found = await client.list_assets(name=ref, include_download_url=download_url, limit=1)
    if not found:
        raise NotFoundError(404, f"no asset named {ref!r}", reason="not_found")
    return found[0]


def _print_asset(asset: Asset, out: TextIO) -> None:
    from .output import print_table  # noqa: PLC0415

    print_table(
        ("NAME", "ID", "OS", "SIZE", "MD5"),
        [(asset.name, asset.id, asset.os or "any", asset.size, asset.md5)],
        out,
    )


async def _push(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    import trio  # noqa: PLC0415

    from .output import print_json  # noqa: PLC0415

    path = Path(args.file)
    name = args.name or path.name
    try:
        local_md5, size = await trio.to_thread.run_sync(file_md5, path)
    except OSError as exc:
        raise AssetCommandError(f"cannot read {path}: {exc.strerror}") from exc
    asset = await client.upsert_asset(name, os=args.os, ttl=args.ttl)
    if asset.md5 == local_md5:
        print(f"{name}: up to date (md5 {local_md5}), not uploaded", file=sys.stderr)
    else:
        if asset.signed_upload_url is None:
            raise AssetCommandError("the server sent no signed upload URL")
        progress = _Progress(f"uploading {name}", size, sys.stderr)
        await client.upload_signed(asset.signed_upload_url, _file_chunks(path, progress), size)
        progress.finish()
        asset = await client.get_asset(asset.id)
        if asset.md5 != local_md5:
            raise AssetCommandError(
                f"uploaded, but the server has md5 {asset.md5}, not {local_md5}"
            )
    if args.json:
        print_json(asset, out)
    else:
        _print_asset(asset, out)


async def _pull(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    import trio  # noqa: PLC0415

    asset = await _find(client, args.asset, download_url=True)
    if asset.signed_download_url is None or asset.md5 is None:
        raise AssetCommandError(f"asset {asset.name!r} has no bytes yet")
    target = Path(args.output or asset.name)
    temp = target.with_name(f".{target.name}.part-{os.getpid()}")
    digest = hashlib.md5(usedforsecurity=False)
    progress = _Progress(f"downloading {asset.name}", asset.size or 0, sys.stderr)
    try:
        async with await trio.open_file(temp, "wb") as file:

            async def sink(chunk: bytes) -> None:
                digest.update(chunk)
                progress.advance(len(chunk))
                await file.write(chunk)

            await client.download_signed(asset.signed_download_url, sink)
        if digest.hexdigest() != asset.md5:
            raise AssetCommandError(f"downloaded md5 {digest.hexdigest()} is not {asset.md5}")
        await trio.to_thread.run_sync(os.replace, temp, target)
    finally:
        await trio.to_thread.run_sync(lambda: temp.unlink(missing_ok=True))
    progress.finish()
    print(f"{target}", file=out)


async def _list(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    from .output import print_json, print_table  # noqa: PLC0415

    assets = await client.list_assets(name_prefix=args.prefix, limit=args.limit)
    if args.json:
        print_json(assets, out)
        return
    rows = [(a.name, a.id, a.os or "any", a.size, a.md5) for a in assets]
    print_table(("NAME", "ID", "OS", "SIZE", "MD5"), rows, out)


async def _delete(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    from .output import print_json  # noqa: PLC0415

    asset = await client.delete_asset((await _find(client, args.asset)).id)
    if args.json:
        print_json(asset, out)
    else:
        print(f"deleted {asset.name} ({asset.id})", file=out)


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Declare ``devyard asset ...`` under the top-level parser."""
    common = _common()
    asset = sub.add_parser("asset", help="files (apps) stored on the server").add_subparsers(
        dest="asset_command", metavar="COMMAND", required=True
    )
    push = _leaf(asset, "push", _push, "upload FILE unless the server has the same md5", common)
    push.add_argument("file", metavar="FILE")
    push.add_argument("--name", help="asset name (default: the file's name)")
    push.add_argument("--os", choices=("ios", "android"), help="platform (default: every one)")
    push.add_argument("--ttl", type=int, metavar="SECONDS", help="delete it this long after upload")
    pull = _leaf(asset, "pull", _pull, "download an asset into a file", common)
    pull.add_argument("asset", metavar="ASSET", help="name or id")
    pull.add_argument("-o", "--output", metavar="FILE", help="default: the asset's name")
    listing = _leaf(asset, "list", _list, "list assets (at most --limit)", common)
    listing.add_argument("--prefix", help="only names starting with this")
    listing.add_argument("--limit", type=int, default=50, help="1-500, default 50")
    delete = _leaf(asset, "delete", _delete, "delete an asset and its bytes", common)
    delete.add_argument("asset", metavar="ASSET", help="name or id")
