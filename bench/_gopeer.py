"""Build the Go yamux peer (`bench/goyamux/main.go`) once, offline, and find it again.

Debian packages Go libraries as GOPATH sources (`golang-github-hashicorp-yamux-dev` installs
`/usr/share/gocode/src/github.com/hashicorp/yamux`), so the build runs in GOPATH mode with
modules off and never touches the network. The binary lands in `bench/.build/` (gitignored)
under a name keyed by the hash of the source, the yamux sources and `go version`, so a changed
program or toolchain rebuilds and an unchanged one is reused. Builds write to a temporary name
and rename into place, so concurrent callers (pytest workers, two benches) are safe.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final

SOURCE: Final = Path(__file__).with_name("goyamux") / "main.go"
BUILD_DIR: Final = Path(__file__).with_name(".build")
DEBIAN_GOPATH: Final = Path("/usr/share/gocode")
YAMUX_PACKAGE: Final = "github.com/hashicorp/yamux"


@dataclass(frozen=True)
class GoPeer:
    """The outcome of a build: `path` to the binary, or None and the `reason` why not."""

    path: Path | None
    reason: str


def _gopaths() -> list[Path]:
    extra = os.environ.get("GOPATH", "")
    paths = [Path(p) for p in extra.split(os.pathsep) if p]
    if DEBIAN_GOPATH not in paths:
        paths.append(DEBIAN_GOPATH)
    return paths


def _yamux_dir(gopaths: list[Path]) -> Path | None:
    for root in gopaths:
        candidate = root / "src" / YAMUX_PACKAGE
        if (candidate / "session.go").is_file():
            return candidate
    return None


def _build_key(go: str, yamux_dir: Path) -> str:
    digest = hashlib.sha256()
    digest.update(SOURCE.read_bytes())
    for source in sorted(yamux_dir.glob("*.go")):
        digest.update(source.name.encode())
        digest.update(source.read_bytes())
    version = subprocess.run(
        [go, "version"], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    digest.update(version.encode())
    return digest.hexdigest()[:16]


def go_peer() -> GoPeer:
    """Build the peer if needed; never raises for a missing toolchain or package."""
    go = shutil.which("go")
    if go is None:
        return GoPeer(None, "go is not installed (Debian package golang-go)")
    gopaths = _gopaths()
    yamux_dir = _yamux_dir(gopaths)
    if yamux_dir is None:
        return GoPeer(
            None,
            f"Go package {YAMUX_PACKAGE} not found in GOPATH "
            "(Debian package golang-github-hashicorp-yamux-dev)",
        )
    try:
        key = _build_key(go, yamux_dir)
    except (OSError, subprocess.SubprocessError) as exc:
        return GoPeer(None, f"`go version` failed: {exc}")
    binary = BUILD_DIR / f"goyamux-{key}"
    if binary.is_file():
        return GoPeer(binary, "cached")

    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.update(
        GO111MODULE="off",
        GOPATH=os.pathsep.join(str(p) for p in gopaths),
        GOFLAGS="",
        CGO_ENABLED="0",
    )
    env.setdefault("GOCACHE", str(BUILD_DIR / "gocache"))
    with tempfile.TemporaryDirectory(dir=BUILD_DIR) as tmp:
        out = Path(tmp) / "goyamux"
        try:
            proc = subprocess.run(
                [go, "build", "-o", str(out), str(SOURCE)],
                check=False,
                cwd=SOURCE.parent,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )
        except subprocess.TimeoutExpired:
            return GoPeer(None, "go build timed out")
        if proc.returncode != 0:
            return GoPeer(None, f"go build failed: {proc.stderr.strip()}")
        os.replace(out, binary)
    for stale in BUILD_DIR.glob("goyamux-*"):
        if stale != binary:
            stale.unlink(missing_ok=True)  # a running old binary keeps its inode
    return GoPeer(binary, "built")


def build_go_peer() -> Path | None:
    """The path of the built peer, or None (see `go_peer().reason` for why)."""
    return go_peer().path
