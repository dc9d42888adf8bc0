"""Running the real ``devyard`` CLI as a subprocess against `devyard up`, as a user would."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

import attrs
import trio

from tests.e2e._cli import DEVYARD, clean_env


@attrs.frozen
class Done:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        assert self.code == 0, self.err
        return json.loads(self.out)


@attrs.frozen
class Cli:
    """The CLI with an environment: the server and key of `devyard up`, and a config dir of
    its own (never the user's)."""

    cwd: Path
    env: dict[str, str]

    @classmethod
    def of(cls, tmp_path: Path, **env: str) -> Cli:
        config = tmp_path / "config"
        return cls(tmp_path, clean_env(DEVYARD_CONFIG_DIR=str(config), **env))

    def but(self, **env: str | None) -> Cli:
        merged = {**self.env, **env}
        return Cli(self.cwd, {k: v for k, v in merged.items() if v is not None})

    async def __call__(self, *args: str, seconds: float = 120) -> Done:
        with trio.fail_after(seconds):
            done = await trio.run_process(
                [*DEVYARD, *args],
                env=self.env,
                cwd=self.cwd,
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
        err = done.stderr.decode()
        assert "Traceback" not in err, err
        return Done(done.returncode, done.stdout.decode(), err)

    async def into_closed_pipe(self, *args: str) -> subprocess.CompletedProcess[bytes]:
        """Run with stdout a pipe whose reader is gone: every write is EPIPE."""
        read, write = os.pipe()
        os.close(read)
        try:
            with trio.fail_after(120):
                return await trio.run_process(
                    [*DEVYARD, *args],
                    env=self.env,
                    cwd=self.cwd,
                    stdout=write,
                    capture_stderr=True,
                    check=False,
                )
        finally:
            os.close(write)

    async def piped_to_head(self, *args: str) -> tuple[int, str, str]:
        """``devyard ARGS | head -1`` in a shell: the CLI's exit status, head's line, stderr."""
        command = " ".join(["exec", *(_quote(a) for a in [*DEVYARD, *args])])
        script = f'( {command} ) 2>err.txt | head -1; echo "status=${{PIPESTATUS[0]}}"'
        with trio.fail_after(120):
            done = await trio.run_process(
                ["bash", "-c", script], env=self.env, cwd=self.cwd, capture_stdout=True, check=False
            )
        lines = done.stdout.decode().splitlines()
        status = int(lines[-1].removeprefix("status="))
        return status, (lines[0] if len(lines) > 1 else ""), (self.cwd / "err.txt").read_text()


def _quote(text: str) -> str:
    return shlex.quote(text)
