"""The host daemon of `python -m bench tunnel`, as its own helper process.

    python -m bench._tunnel_rig host WORKDIR URL TOKENFILE [LINK]

runs hostd (virtual drivers, capacity 1) linked to the server at URL (on the raw link port
LINK, tcp://HOST:PORT, when given), prints `READY {}` once it
serves, and exits when its stdin closes (the harness is gone) or on SIGTERM. The server is
`python -m bench._adb_rig server WORKDIR` (the same real server the adb bench uses); the
connectors are real `devyard connector run` processes.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Final

import trio

from bench._adb_rig import bench_hostd_config
from bench._child import run_with_lifeline
from devyard.hostd.daemon import serve_hostd

READY: Final = "READY "


async def _host(workdir: Path, url: str, token_file: str, link: str | None = None) -> None:
    hostd = await bench_hostd_config(workdir, url, token_file, capacity=1, link=link)
    async with trio.open_nursery() as nursery:
        await nursery.start(partial(serve_hostd, hostd))
        print(READY + json.dumps({}), flush=True)
        await trio.sleep_forever()


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    if len(argv) not in (4, 5) or argv[0] != "host":
        print(__doc__, file=sys.stderr)
        return 2
    body: Callable[[], Awaitable[None]] = partial(_host, Path(argv[1]), *argv[2:])
    trio.run(run_with_lifeline, body)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
