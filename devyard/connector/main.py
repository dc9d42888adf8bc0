"""The connector's process mains: ``devyard connector run`` and ``devyard connector quick``.

Signals: the first SIGINT/SIGTERM drains (the link says ``shutdown`` and GO_AWAY(connector
clean stop), streams in flight get ``--grace``); a second one stops at once (exit 130). A
permanent end exits with its code (`devyard.connector._errors`); nothing secret is printed.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Sequence
from typing import Any, Final, TextIO

import trio

from .._process import Stopped, run_until_signalled
from ..core.link import find_in_group
from ._errors import EXIT_ERROR, EXIT_OK, PermanentError
from .link import ConnectorConfig, serve_connector
from .metrics import Metrics, serve_metrics

log = logging.getLogger(__name__)

__all__ = ["EXIT_INTERRUPTED", "run_connector", "run_quick"]

EXIT_INTERRUPTED: Final = 130


async def run_connector(
    config: ConnectorConfig,
    *,
    metrics_listen: tuple[str, int] | None,
    err: TextIO,
) -> int:
    """``devyard connector run``'s trio main; the process's exit code."""
    metrics = Metrics()

    async def main(shutdown: trio.Event) -> None:
        async with trio.open_nursery() as nursery:
            if metrics_listen is not None:
                host, port = metrics_listen
                await nursery.start(serve_metrics, metrics, host, port)
            await serve_connector(config, shutdown=shutdown, metrics=metrics)
            nursery.cancel_scope.cancel()

    try:
        outcome = await run_until_signalled(
            main, graceful="draining (streams in flight get --grace)"
        )
    except Exception as exc:
        permanent = find_in_group(exc, PermanentError)
        if permanent is None:
            raise
        print(f"devyard connector: stopped for good: {permanent}", file=err, flush=True)
        return permanent.exit_code
    return EXIT_INTERRUPTED if isinstance(outcome, Stopped) else EXIT_OK


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
