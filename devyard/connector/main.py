"""The connector's process mains: ``devyard connector run`` and ``devyard connector quick``.

Signals: the first SIGINT/SIGTERM drains (the link says ``shutdown`` and GO_AWAY(connector
clean stop), streams in flight get ``--grace``); a second one stops at once (exit 130). A
permanent end exits with its code (`devyard.connector._errors`); nothing secret is printed.
"""

from __future__ import annotations

import logging
import secrets
import signal
from collections.abc import AsyncIterator, Sequence
from typing import Any, Final, TextIO

import trio

from ._errors import EXIT_ERROR, EXIT_OK, find_permanent
from .link import ConnectorConfig, serve_connector
from .metrics import Metrics, serve_metrics

log = logging.getLogger(__name__)

__all__ = ["run_connector", "run_quick"]

EXIT_INTERRUPTED: Final = 130


async def _watch_signals(
    receiver: AsyncIterator[int],
    shutdown: trio.Event,
    forced: trio.Event,
    stop_now: trio.CancelScope,
) -> None:
    async for signum in receiver:
        name = signal.Signals(signum).name
        if shutdown.is_set():
            log.warning("%s again: stopping now", name)
            forced.set()
            stop_now.cancel()
            return
        log.info("%s: draining (a second signal stops at once)", name)
        shutdown.set()


async def run_connector(
    config: ConnectorConfig,
    *,
    metrics_listen: tuple[str, int] | None,
    err: TextIO,
) -> int:
    """``devyard connector run``'s trio main; the process's exit code."""
    shutdown = trio.Event()
    forced = trio.Event()
    metrics = Metrics()
    try:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as receiver:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_watch_signals, receiver, shutdown, forced, nursery.cancel_scope)
                if metrics_listen is not None:
                    host, port = metrics_listen
                    await nursery.start(serve_metrics, metrics, host, port)
                try:
                    await serve_connector(config, shutdown=shutdown, metrics=metrics)
                finally:
                    nursery.cancel_scope.cancel()
        if forced.is_set():
            return EXIT_INTERRUPTED
    except Exception as exc:
        permanent = find_permanent(exc)
        if permanent is None:
            raise
        print(f"devyard connector: stopped for good: {permanent}", file=err, flush=True)
        return permanent.exit_code
    return EXIT_OK


async def run_quick(
    config: ConnectorConfig,
    *,
    api_key: str,
    selectors: Sequence[str],
    metrics_listen: tuple[str, int] | None,
    out: TextIO,
    err: TextIO,
) -> int:
    """``devyard connector quick``: create an ephemeral tunnel, print its name, hold it; a
    clean stop deletes it (the edge does too; this makes sure)."""
    from ..client import AsyncClient, DevyardError, NotFoundError  # noqa: PLC0415

    name = f"quick-{secrets.token_hex(4)}"
    try:
        async with AsyncClient(config.server_url, api_key) as client:
            created: Any = await client.request(
                "POST",
                "/v1/tunnels",
                body={"name": name, "selectors": list(selectors), "ephemeral": True},
            )
    except DevyardError as exc:
        print(f"devyard connector quick: error: {exc}", file=err, flush=True)
        return EXIT_ERROR
    print(name, file=out, flush=True)
    code = await run_connector(
        ConnectorConfig(
            server_url=config.server_url,
            token=str(created["token"]),
            replace=config.replace,
            grace=config.grace,
            hostname=config.hostname,
            backoff_base=config.backoff_base,
            link=config.link,
        ),
        metrics_listen=metrics_listen,
        err=err,
    )
    if code == EXIT_OK:
        try:
            async with AsyncClient(config.server_url, api_key) as client:
                await client.request("DELETE", f"/v1/tunnels/{name}")
        except NotFoundError:
            pass  # the edge deleted it on the clean stop already
        except DevyardError as exc:
            print(f"devyard connector quick: could not delete {name}: {exc}", file=err)
    return code
