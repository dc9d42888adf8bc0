"""``devyard android|ios|xcode|gradle create|list|get|delete`` and the device verbs.

    devyard android create --label pr=42 --wait [--rm] [--json]
    devyard android list [--label pr=42] [--state ready] [--json]
    devyard android get|delete ID
    devyard android screenshot ID -o shot.png | tap ID X Y | type ID TEXT
    devyard android open-url ID URL | install ID FILE | apps ID

Device verbs talk to the instance's own API (``status.apiUrl``, with the instance token the
API returns to a controlling key), streamed through the server's gateway. Tables for people,
``--json`` for scripts (a list is every page, auto-paged, as one JSON array). Exit codes:
docs/cli.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TextIO
from urllib.parse import quote

from .commands import EXIT_CONFLICT, EXIT_TIMEOUT, CommandError, UsageError, _common, _leaf

if TYPE_CHECKING:
    from .client import AsyncClient

__all__ = ["add_commands"]

PLATFORMS: Final = ("android", "ios", "xcode", "gradle")
_DEVICE_PLATFORMS: Final = ("android", "ios")
_PAGE: Final = 100
_CHUNK: Final = 256 * 1024


def _collection(args: argparse.Namespace) -> str:
    return f"/v1/{args.platform}_instances"


def _one(args: argparse.Namespace) -> str:
    return f"{_collection(args)}/{quote(str(args.id), safe='')}"


def _labels(pairs: list[str]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not key:
            raise UsageError(f"--label takes KEY=VALUE, got {pair!r}")
        labels[key] = value
    return labels


def _row(instance: Mapping[str, Any]) -> tuple[object, ...]:
    meta, status = instance.get("metadata", {}), instance.get("status", {})
    labels = ",".join(f"{k}={v}" for k, v in sorted(meta.get("labels", {}).items()))
    return (
        meta.get("id"),
        status.get("state"),
        meta.get("region") or instance.get("spec", {}).get("region"),
        labels or None,
        meta.get("createdAt"),
    )


_HEADERS: Final = ("ID", "STATE", "REGION", "LABELS", "CREATED")


def _show(instances: list[Mapping[str, Any]], args: argparse.Namespace, out: TextIO) -> None:
    from .output import print_table  # noqa: PLC0415

    if args.json:
        json.dump(instances if args.many else instances[0], out, indent=2)
        out.write("\n")
        return
    print_table(_HEADERS, [_row(i) for i in instances], out)


async def _create(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    import trio  # noqa: PLC0415

    body: dict[str, Any] = {"metadata": {"labels": _labels(args.label)}}
    if args.name:
        body["metadata"]["displayName"] = args.name
    if args.region:
        body["spec"] = {"region": args.region}
    params = {"wait": "true"} if args.wait or args.rm else None
    with trio.move_on_after(args.timeout) as waited:
        created: Any = await client.request("POST", _collection(args), body=body, params=params)
    if waited.cancelled_caught:
        raise CommandError(f"not ready within {args.timeout:g} s", EXIT_TIMEOUT)
    args.many = False
    _show([created], args, out)
    out.flush()
    if not args.rm:
        return
    instance_id = created["metadata"]["id"]
    import signal  # noqa: PLC0415

    # the receiver first, then the message: a Ctrl-C right after it must delete, not kill
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        print(
            f"{instance_id} is ready; Ctrl-C (or SIGTERM) deletes it", file=sys.stderr, flush=True
        )
        async for _ in signals:
            break
    with trio.CancelScope(shield=True), trio.move_on_after(30):
        await client.request("DELETE", f"{_collection(args)}/{instance_id}")
        print(f"deleted {instance_id}", file=sys.stderr, flush=True)


async def _pages(client: AsyncClient, path: str, params: dict[str, str]) -> AsyncIterator[Any]:
    after: str | None = None
    while True:
        page: Any = await client.request(
            "GET",
            path,
            params={**params, "limit": str(_PAGE), **({"startingAfter": after} if after else {})},
        )
        for item in page["items"]:
            yield item
        if not page.get("hasMore") or not page["items"]:
            return
        after = page["items"][-1]["metadata"]["id"]


async def _list(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    params: dict[str, str] = {}
    if args.label:
        params["labelSelector"] = ",".join(args.label)
    if args.state:
        params["state"] = args.state
    items = [item async for item in _pages(client, _collection(args), params)]
    args.many = True
    _show(items, args, out)


async def _get(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    found: Any = await client.request("GET", _one(args))
    args.many = False
    _show([found], args, out)


async def _delete(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    ended: Any = await client.request("DELETE", _one(args))
    if args.json:
        json.dump(ended, out, indent=2)
        out.write("\n")
        return
    out.write(f"deleted {args.id}\n")


# -- device verbs: the instance's own API ----------------------------------------------------


async def _device(
    client: AsyncClient,
    args: argparse.Namespace,
    method: str,
    path: str,
    *,
    body: object = None,
    content: Any = None,
    params: Mapping[str, str] | None = None,
) -> Any:
    """One request to the instance's device API; the httpx response."""
    import httpx  # noqa: PLC0415

    from ._errors import TransportError, error_for_status  # noqa: PLC0415

    instance: Any = await client.request("GET", _one(args))
    status = instance.get("status", {})
    if status.get("state") != "ready" or not status.get("apiUrl") or not status.get("token"):
        raise CommandError(
            f"{args.id} is {status.get('state', 'not ready')}, not ready", EXIT_CONFLICT
        )
    headers = {"Authorization": f"Bearer {status['token']}"}
    try:
        async with httpx.AsyncClient(timeout=300) as http:
            answer = await http.request(
                method,
                status["apiUrl"].rstrip("/") + path,
                json=body,
                content=content,
                params=params,
                headers=headers,
            )
    except httpx.HTTPError as exc:
        raise TransportError(f"{method} {path} on {args.id}: {exc!r}") from exc
    if answer.status_code >= 400:
        try:
            detail = answer.json()
            message = str(detail.get("message") or detail.get("error") or answer.text)
        except ValueError:
            message = answer.text.strip() or answer.reason_phrase
        raise error_for_status(answer.status_code, message, reason=None)
    return answer


async def _ok(answer: Any, args: argparse.Namespace, out: TextIO, said: str) -> None:
    if args.json:
        json.dump(answer.json(), out, indent=2)
        out.write("\n")
    else:
        out.write(said + "\n")


async def _screenshot(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    import trio  # noqa: PLC0415

    answer = await _device(client, args, "GET", "/screenshot")
    target = Path(args.output or f"{args.id}.png")
    if args.output == "-":
        sys.stdout.buffer.write(answer.content)
        sys.stdout.buffer.flush()
        return
    await trio.Path(target).write_bytes(answer.content)
    if args.json:
        json.dump({"path": str(target), "bytes": len(answer.content)}, out)
        out.write("\n")
    else:
        out.write(f"{target} ({len(answer.content)} bytes)\n")


async def _tap(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    body = {"type": "tap", "x": args.x, "y": args.y}
    await _ok(await _device(client, args, "POST", "/input", body=body), args, out, "tapped")


async def _type(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    body = {"type": "text", "text": args.text}
    await _ok(await _device(client, args, "POST", "/input", body=body), args, out, "typed")


async def _open_url(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    answer = await _device(client, args, "POST", "/open-url", body={"url": args.url})
    await _ok(answer, args, out, f"opened {args.url}")


async def _install(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    import trio  # noqa: PLC0415

    path = Path(args.file)
    try:
        size = (await trio.Path(path).stat()).st_size
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from exc

    async def chunks() -> AsyncIterator[bytes]:
        async with await trio.open_file(path, "rb") as source:
            sent = 0
            while chunk := await source.read(_CHUNK):
                sent += len(chunk)
                if not args.json and sys.stderr.isatty():
                    print(f"\rupload {sent * 100 // max(size, 1)}%", end="", file=sys.stderr)
                yield chunk

    answer = await _device(
        client, args, "POST", "/apps", content=chunks(), params={"suffix": path.suffix}
    )
    if not args.json and sys.stderr.isatty():
        print(file=sys.stderr)
    app = answer.json()
    await _ok(answer, args, out, f"installed {app.get('id') or path.name}")


async def _apps(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    from .output import print_table  # noqa: PLC0415

    apps = (await _device(client, args, "GET", "/apps")).json()["items"]
    if args.json:
        json.dump(apps, out, indent=2)
        out.write("\n")
        return
    rows = [(a.get("id"), a.get("label"), a.get("version")) for a in apps]
    print_table(("APP", "LABEL", "VERSION"), rows, out)


def _article(platform: str) -> str:
    return f"{'an' if platform[0] in 'aeiou' else 'a'} {platform}"


def _positive(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    common = _common()
    for platform in PLATFORMS:
        group = sub.add_parser(platform, help=f"{platform} instances: create, list, get, delete")
        group.set_defaults(platform=platform)
        verbs = group.add_subparsers(dest="instance_command", metavar="COMMAND", required=True)
        create = _leaf(verbs, "create", _create, f"create {_article(platform)} instance", common)
        create.add_argument("--label", action="append", default=[], metavar="KEY=VALUE")
        create.add_argument("--name", help="a display name")
        create.add_argument("--region", help="place it in this region")
        create.add_argument("--wait", action="store_true", help="return once it is ready")
        create.add_argument(
            "--rm", action="store_true", help="wait until ready, hold it; Ctrl-C deletes it"
        )
        create.add_argument(
            "--timeout", type=_positive, default=300.0, metavar="SECONDS", help="for --wait"
        )
        listing = _leaf(verbs, "list", _list, f"list {platform} instances (every page)", common)
        listing.add_argument(
            "--label", action="append", default=[], metavar="SELECTOR", help="e.g. pr=42"
        )
        listing.add_argument("--state", help="comma list: creating,assigned,ready,terminated")
        for name, handler, text in (("get", _get, "show one"), ("delete", _delete, "end one")):
            _leaf(verbs, name, handler, f"{text} {platform} instance", common).add_argument("id")
        if platform not in _DEVICE_PLATFORMS:
            continue
        shot = _leaf(verbs, "screenshot", _screenshot, "save a PNG screenshot", common)
        shot.add_argument("id")
        shot.add_argument("-o", "--output", metavar="FILE", help="default ID.png; - is stdout")
        tap = _leaf(verbs, "tap", _tap, "tap at X Y (pixels of the screen)", common)
        tap.add_argument("id")
        tap.add_argument("x", type=float)
        tap.add_argument("y", type=float)
        typing = _leaf(verbs, "type", _type, "type TEXT into the focused field", common)
        typing.add_argument("id")
        typing.add_argument("text")
        open_url = _leaf(verbs, "open-url", _open_url, "open a URL on the device", common)
        open_url.add_argument("id")
        open_url.add_argument("url")
        install = _leaf(
            verbs, "install", _install, "install an app file (apk, ipa, app.zip)", common
        )
        install.add_argument("id")
        install.add_argument("file")
        _leaf(verbs, "apps", _apps, "list installed apps", common).add_argument("id")
