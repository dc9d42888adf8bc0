"""`python -m bench._lifeline CMD [ARGS...]`: run CMD, and end it when our stdin reaches EOF.

For helpers that cannot watch a pipe themselves (sshd, ssh): the harness holds the other end
of our stdin, so if the harness dies without cleaning up (SIGKILL), EOF arrives here and CMD is
ended instead of being left listening. CMD shares our process group, so the harness's own
cleanup (a signal to the group) reaches both of us.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m bench._lifeline CMD [ARGS...]", file=sys.stderr)
        return 2
    child = subprocess.Popen(argv, stdin=subprocess.DEVNULL)

    def watch_stdin() -> None:
        while os.read(sys.stdin.fileno(), 4096):
            pass
        child.terminate()
        try:
            child.wait(timeout=3)
        except subprocess.TimeoutExpired:
            child.kill()

    threading.Thread(target=watch_stdin, daemon=True).start()
    return child.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
