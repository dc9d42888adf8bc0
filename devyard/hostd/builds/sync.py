"""``POST {apiUrl}/sync``: a source tree into a build instance's workspace, as the SDK sends it.

The body (``Content-Encoding: zstd|gzip|identity``) is ``[u32 BE metaLen][meta JSON][payloads]``
with meta ``{id, rootName, files: [{path, size, sha256, mode?, link?}], payloads: [{kind:
full|delta, path, basisSha256?, targetSha256, length}]}`` (`@limrun/api` ``folder-sync.ts``).
``files`` is the whole tree: what the workspace holds beyond it is deleted (ignored paths
excepted, `paths.py`). A ``delta`` is an xdelta3 (VCDIFF) patch against the workspace's copy;
when that copy is not the patch's basis, or a file without a payload is missing or differs,
the answer is ``{ok: false, needFull: [paths]}`` (HTTP 200, the SDK then sends those in full)
and the rest of the sync is applied.

Stage, then commit: the whole manifest is checked first (a bad path, link or field is a
`BuildError` and nothing is written), payloads land in a staging directory next to the tree
and are hash-checked there (a full payload whose bytes do not hash to its ``targetSha256`` is
refused the same way), and only then does the commit rename staged files into the tree, make
links and delete what the manifest no longer holds. The commit only renames and unlinks: it
cannot fail half-way for a reason in the request. No exec runs during a sync (`BuildHost`),
so nothing in the sandbox moves the tree under it; still, every parent directory is checked
with ``lstat`` and a symlink where the manifest wants a directory is replaced, never
followed: hostd never reads or writes outside the tree through a link a build left.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import stat
import struct
import tempfile
import zlib
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, Final, Protocol

import attrs
import trio
import zstandard

from .errors import BuildError, BuildReason
from .paths import GitIgnore, always_ignored, check_link, check_path

__all__ = ["MAX_META", "DecodedBody", "FileSpec", "Workspace", "parse_files"]

MAX_META: Final = 64 * 1024 * 1024
DEFAULT_MAX_BODY: Final = 8 * 1024 * 1024 * 1024
MAX_FILES: Final = 500_000
_SHA: Final = re.compile(r"[0-9a-f]{64}")
_CHUNK: Final = 256 * 1024
_ZSTD_SLICE: Final = 1024  # input per decompress call: bounds one call's output (RLE blocks)
_GZIP_OUT: Final = 256 * 1024
_PATCH_TIMEOUT_S: Final = 300.0


def _bad(message: str) -> BuildError:
    return BuildError(BuildReason.BAD_REQUEST, message)


@attrs.frozen
class FileSpec:
    path: str
    size: int
    sha256: str
    mode: int | None = None
    link: str | None = None


@attrs.frozen
class PayloadSpec:
    kind: str  # "full" | "delta"
    path: str
    target: str
    length: int
    basis: str | None = None


def _sha(value: object, what: str) -> str:
    if not isinstance(value, str) or not _SHA.fullmatch(value.lower()):
        raise _bad(f"{what} must be a hex SHA-256")
    return value.lower()


def _count(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _bad(f"{what} must be a non-negative integer")
    return value


def parse_meta(raw: bytes) -> tuple[list[FileSpec], list[PayloadSpec]]:
    """The manifest, every field checked; `BuildError` on the first bad one."""
    try:
        meta = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise _bad(f"the sync manifest is not JSON: {exc}") from None
    if not isinstance(meta, dict):
        raise _bad("the sync manifest must be a JSON object")
    raw_files, raw_payloads = meta.get("files"), meta.get("payloads", [])
    if not isinstance(raw_payloads, list):
        raise _bad("'payloads' must be a list")
    files = parse_files(raw_files)
    if len(raw_payloads) > len(files):
        raise _bad("more payloads than files")
    payloads: list[PayloadSpec] = []
    for item in raw_payloads:
        if not isinstance(item, dict):
            raise _bad("each entry of 'payloads' must be an object")
        path = check_path(item.get("path"))
        entry = files.get(path)
        if entry is None or entry.link is not None:
            raise _bad(f"payload {path!r} is not a file of the manifest")
        kind = item.get("kind")
        if kind not in ("full", "delta"):
            raise _bad(f"payload {path!r}: kind must be 'full' or 'delta'")
        target = _sha(item.get("targetSha256"), f"the targetSha256 of {path!r}")
        if target != entry.sha256:
            raise _bad(f"payload {path!r}: targetSha256 differs from the manifest's sha256")
        basis = (
            _sha(item.get("basisSha256"), f"the basisSha256 of {path!r}")
            if kind == "delta"
            else None
        )
        length = _count(item.get("length"), f"the length of payload {path!r}")
        payloads.append(PayloadSpec(str(kind), path, target, length, basis))
    return list(files.values()), payloads


def parse_files(raw_files: object) -> dict[str, FileSpec]:
    """A manifest's ``files`` list, every entry checked; `BuildError` on the first bad one."""
    if not isinstance(raw_files, list):
        raise _bad("'files' must be a list")
    if len(raw_files) > MAX_FILES:
        raise BuildError(BuildReason.TOO_LARGE, f"a sync takes at most {MAX_FILES} files")
    files: dict[str, FileSpec] = {}
    for item in raw_files:
        if not isinstance(item, dict):
            raise _bad("each entry of 'files' must be an object")
        path = check_path(item.get("path"))
        if path in files:
            raise _bad(f"path {path!r} is listed twice")
        link = item.get("link")
        mode = item.get("mode")
        if mode is not None:
            mode = _count(mode, f"the mode of {path!r}") & 0o777
        files[path] = FileSpec(
            path=path,
            size=_count(item.get("size"), f"the size of {path!r}"),
            sha256=_sha(item.get("sha256"), f"the sha256 of {path!r}"),
            mode=mode,
            link=None if link is None else check_link(path, link),
        )
    _check_prefixes(files)
    return files


def _check_prefixes(files: dict[str, FileSpec]) -> None:
    """No entry may be a parent directory of another (``a`` and ``a/b`` both listed)."""
    for path in files:
        parts = path.split("/")
        for end in range(1, len(parts)):
            if "/".join(parts[:end]) in files:
                raise _bad(f"path {path!r} lies under another entry of the manifest")


class DecodedBody:
    """The request body, decompressed as it is read; at most *limit* bytes after decoding."""

    def __init__(self, chunks: AsyncIterator[bytes], encoding: str, limit: int) -> None:
        self._chunks = chunks
        self._limit = limit
        self._total = 0
        self._buf = bytearray()
        self._pieces: Iterator[bytes] = iter(())
        self._eof = False
        encoding = encoding.strip().lower()
        self._decode: Callable[[bytes], Iterator[bytes]]
        if encoding in ("", "identity"):
            self._decode = lambda data: iter((data,))
        elif encoding == "gzip":
            gz = zlib.decompressobj(wbits=31)

            def gunzip(data: bytes) -> Iterator[bytes]:
                while data:
                    try:
                        yield gz.decompress(data, _GZIP_OUT)
                    except zlib.error as exc:
                        raise _bad(f"the gzip body is corrupt: {exc}") from None
                    data = gz.unconsumed_tail

            self._decode = gunzip
        elif encoding == "zstd":
            zs = zstandard.ZstdDecompressor().decompressobj()

            def unzstd(data: bytes) -> Iterator[bytes]:
                for start in range(0, len(data), _ZSTD_SLICE):
                    try:
                        yield zs.decompress(data[start : start + _ZSTD_SLICE])
                    except zstandard.ZstdError as exc:
                        raise _bad(f"the zstd body is corrupt: {exc}") from None

            self._decode = unzstd
        else:
            raise _bad(f"Content-Encoding {encoding!r} is not one of zstd, gzip, identity")

    async def _fill(self) -> bool:
        """More decoded bytes into the buffer; False at the end of the body."""
        while True:
            for piece in self._pieces:
                if piece:
                    self._total += len(piece)
                    if self._total > self._limit:
                        raise BuildError(
                            BuildReason.TOO_LARGE, f"the sync body exceeds {self._limit} bytes"
                        )
                    self._buf += piece
                    return True
            if self._eof:
                return False
            chunk = await anext(self._chunks, None)
            if chunk is None:
                self._eof = True
                continue
            self._pieces = self._decode(chunk)

    async def exact(self, size: int) -> bytes:
        while len(self._buf) < size:
            if not await self._fill():
                raise _bad("the sync body ended early")
        out = bytes(self._buf[:size])
        del self._buf[:size]
        return out

    async def stream(self, size: int) -> AsyncIterator[bytes]:
        left = size
        while left:
            if not self._buf and not await self._fill():
                raise _bad("the sync body ended inside a payload")
            piece = bytes(self._buf[: min(left, _CHUNK)])
            del self._buf[: len(piece)]
            left -= len(piece)
            yield piece

    async def rest(self) -> AsyncIterator[bytes]:
        """Everything left, decoded, in pieces."""
        while self._buf or await self._fill():
            piece = bytes(self._buf[:_CHUNK])
            del self._buf[: len(piece)]
            yield piece

    async def at_end(self) -> bool:
        return not self._buf and not await self._fill()


class BlobSource(Protocol):
    """Where a content-addressed commit takes file bytes from (cas.BlobStore). Blocking."""

    def has(self, sha256: str) -> bool: ...

    def path(self, sha256: str) -> Path | None: ...

    def copy(self, sha256: str, dest: Path) -> bool: ...


@attrs.define
class _Cached:
    sha256: str
    size: int
    mtime_ns: int


class Workspace:
    """One build instance's source tree (*root*) and its sync bookkeeping (*meta_dir*).

    *owner*: (uid, gid) the tree's files and directories are given (the sandbox's build user),
    or None to leave them hostd's. Syncs are serialized; the caller keeps execs out.
    """

    def __init__(
        self,
        root: Path,
        meta_dir: Path,
        *,
        owner: tuple[int, int] | None = None,
        xdelta3: str = "xdelta3",
        max_body: int = DEFAULT_MAX_BODY,
    ) -> None:
        self.root = root
        self.meta_dir = meta_dir
        self.owner = owner
        self.xdelta3 = xdelta3
        self.max_body = max_body
        self.lock = trio.Lock()
        self._state: dict[str, _Cached] = {}

    def known_shas(self) -> set[str]:
        """The SHA-256 of every file the last syncs wrote or checked (the blob store's pins)."""
        return {cached.sha256 for cached in self._state.values()}

    def create(self) -> None:
        """Make the (empty) tree and the bookkeeping directory (blocking)."""
        self.meta_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.root.mkdir(mode=0o755, parents=True, exist_ok=True)
        self._chown(self.root)

    async def sync(self, chunks: AsyncIterator[bytes], encoding: str) -> dict[str, Any]:
        async with self.lock:
            started = trio.current_time()
            body = DecodedBody(chunks, encoding, self.max_body)
            (length,) = struct.unpack(">I", await body.exact(4))
            if length > MAX_META:
                raise BuildError(BuildReason.TOO_LARGE, f"the manifest exceeds {MAX_META} bytes")
            files, payloads = parse_meta(await body.exact(length))
            stage = Path(await trio.to_thread.run_sync(self._mkstage))
            try:
                staged, need_full = await self._receive_all(body, payloads, stage)
                if not await body.at_end():
                    raise _bad("the sync body goes on after its last payload")
                skip = await trio.to_thread.run_sync(self._skipper, staged)
                for entry in files:
                    if entry.link is None and not skip(entry.path):
                        if entry.path in staged or entry.path in need_full:
                            continue
                        if await trio.to_thread.run_sync(self._sha_now, entry.path) != entry.sha256:
                            need_full.append(entry.path)
                written, deleted = await trio.to_thread.run_sync(self._commit, files, staged, skip)
            finally:
                await trio.to_thread.run_sync(lambda: shutil.rmtree(stage, ignore_errors=True))
        answer: dict[str, Any] = {
            "ok": not need_full,
            "syncDurationMs": round((trio.current_time() - started) * 1000),
            "files": len(files),
            "written": written,
            "deleted": deleted,
        }
        if need_full:
            answer["needFull"] = sorted(need_full)
        return answer

    # ---- the content-addressed mode (cas.py keeps the blobs) ------------------------------

    async def missing(self, files: list[FileSpec], blobs: BlobSource) -> tuple[list[str], bool]:
        """The blobs a commit of *files* would lack (sorted), and whether the answer is
        complete: False when the root ``.gitignore``'s own blob is unknown (then only that
        blob is listed: what it ignores is not asked for)."""
        async with self.lock:
            _, lacking, known = await trio.to_thread.run_sync(self._plan_tree, files, blobs, None)
        return sorted(lacking), known

    async def commit_tree(self, files: list[FileSpec], blobs: BlobSource) -> dict[str, Any]:
        """Make the workspace *files*, every changed file's bytes from *blobs*. When a blob is
        missing nothing is written and the answer is ``{ok: false, missing: [sha256]}``."""
        async with self.lock:
            started = trio.current_time()
            stage = Path(await trio.to_thread.run_sync(self._mkstage))
            try:
                staged, lacking, _ = await trio.to_thread.run_sync(
                    self._plan_tree, files, blobs, stage
                )
                if lacking:
                    return {"ok": False, "missing": sorted(lacking), "files": len(files)}
                skip = await trio.to_thread.run_sync(self._skipper, staged)
                written, deleted = await trio.to_thread.run_sync(self._commit, files, staged, skip)
            finally:
                await trio.to_thread.run_sync(lambda: shutil.rmtree(stage, ignore_errors=True))
        return {
            "ok": True,
            "syncDurationMs": round((trio.current_time() - started) * 1000),
            "files": len(files),
            "written": written,
            "deleted": deleted,
        }

    def _skipper(self, staged: dict[str, Path]) -> Callable[[str], bool]:
        ignore = self._gitignore(staged)
        return lambda path: always_ignored(path) or ignore.ignores(path)

    def _plan_tree(
        self, files: list[FileSpec], blobs: BlobSource, stage: Path | None
    ) -> tuple[dict[str, Path], set[str], bool]:
        """(what is staged from *blobs* into *stage* (None: only look), the blobs lacking,
        whether the root ``.gitignore`` was known). Blocking."""
        staged: dict[str, Path] = {}
        lacking: set[str] = set()

        def take(entry: FileSpec) -> bool:
            """The entry's bytes are in the tree or staged; False if its blob is lacking."""
            if self._sha_now(entry.path) == entry.sha256:
                return True
            if stage is None:
                if blobs.has(entry.sha256):
                    return True
            else:
                dest = stage / str(len(staged))
                if blobs.copy(entry.sha256, dest):
                    staged[entry.path] = dest
                    return True
            lacking.add(entry.sha256)
            return False

        gitignore = next((f for f in files if f.path == ".gitignore" and f.link is None), None)
        if gitignore is not None and not take(gitignore):
            return staged, lacking, False
        if stage is None and gitignore is not None and ".gitignore" not in staged:
            # only looking: read the .gitignore the commit would use
            source = blobs.path(gitignore.sha256)
            if self._sha_now(".gitignore") != gitignore.sha256 and source is not None:
                staged[".gitignore"] = source
        skip = self._skipper(staged)
        if stage is None:
            staged.pop(".gitignore", None)
        for entry in files:
            if entry.link is None and entry is not gitignore and not skip(entry.path):
                take(entry)
        return staged, lacking, True

    def _mkstage(self) -> str:
        return tempfile.mkdtemp(prefix="stage-", dir=self.meta_dir)

    async def _receive_all(
        self, body: DecodedBody, payloads: list[PayloadSpec], stage: Path
    ) -> tuple[dict[str, Path], list[str]]:
        staged: dict[str, Path] = {}
        need_full: list[str] = []
        for number, payload in enumerate(payloads):
            data = stage / str(number)
            digest = hashlib.sha256()
            async with await trio.open_file(data, "wb") as out:
                async for piece in body.stream(payload.length):
                    digest.update(piece)
                    await out.write(piece)
            if payload.kind == "full":
                if digest.hexdigest() != payload.target:
                    raise _bad(f"payload {payload.path!r} does not hash to its targetSha256")
                staged[payload.path] = data
                continue
            result = await self._apply_delta(payload, data, stage / f"{number}.out")
            if result is None:
                need_full.append(payload.path)
            else:
                staged[payload.path] = result
        return staged, need_full

    async def _apply_delta(self, payload: PayloadSpec, patch: Path, out: Path) -> Path | None:
        """The patched file, or None when the workspace's copy is not the patch's basis (or
        the patch does not produce the target): the client sends that file in full."""
        if await trio.to_thread.run_sync(self._sha_now, payload.path) != payload.basis:
            return None
        basis = self._safe(payload.path)
        assert basis is not None  # _sha_now found it
        with trio.move_on_after(_PATCH_TIMEOUT_S):
            done = await trio.run_process(
                [self.xdelta3, "-d", "-f", "-s", str(basis), str(patch), str(out)],
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
            if (
                done.returncode == 0
                and await trio.to_thread.run_sync(_hash_file, out) == payload.target
            ):
                return out
        return None

    # ---- blocking helpers (run in a thread) -----------------------------------------------

    def _safe(self, path: str) -> Path | None:
        """The tree path of *path* if every parent is a real directory (no link followed)."""
        current = self.root
        for segment in path.split("/")[:-1]:
            current = current / segment
            try:
                if not stat.S_ISDIR(os.lstat(current).st_mode):
                    return None
            except OSError:
                return None
        return self.root / path

    def _sha_now(self, path: str) -> str | None:
        """The SHA-256 of the tree's *path* now (a link's: of its target string)."""
        target = self._safe(path)
        if target is None:
            return None
        try:
            st = os.lstat(target)
            if stat.S_ISLNK(st.st_mode):
                return hashlib.sha256(os.readlink(target).encode()).hexdigest()
            if not stat.S_ISREG(st.st_mode):
                return None
            cached = self._state.get(path)
            if cached is not None and (cached.size, cached.mtime_ns) == (
                st.st_size,
                st.st_mtime_ns,
            ):
                return cached.sha256
            digest = _hash_file(target)
        except OSError:
            return None
        self._state[path] = _Cached(digest, st.st_size, st.st_mtime_ns)
        return digest

    def _gitignore(self, staged: dict[str, Path]) -> GitIgnore:
        source = staged.get(".gitignore") or self._safe(".gitignore")
        try:
            if source is None or not stat.S_ISREG(os.lstat(source).st_mode):
                return GitIgnore()
            with open(source, encoding="utf-8", errors="replace") as handle:
                return GitIgnore.parse(handle.read(1024 * 1024))
        except OSError:
            return GitIgnore()

    def _chown(self, path: Path) -> None:
        if self.owner is not None:
            os.lchown(path, *self.owner)

    def _make_parents(self, path: str) -> Path:
        current = self.root
        for segment in path.split("/")[:-1]:
            current = current / segment
            try:
                st = os.lstat(current)
            except FileNotFoundError:
                st = None
            if st is not None and not stat.S_ISDIR(st.st_mode):
                current.unlink()  # a file or a link where the manifest wants a directory
                st = None
            if st is None:
                current.mkdir(mode=0o755)
                self._chown(current)
        return self.root / path

    def _fix_mode(self, entry: FileSpec) -> None:
        """An unchanged file whose mode changed (``chmod +x``) gets the new mode."""
        target = self._safe(entry.path)
        if entry.mode is None or target is None:
            return
        with contextlib.suppress(OSError):
            st = os.lstat(target)
            if stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) != entry.mode:
                os.chmod(target, entry.mode)

    def _existing(self, skip: Callable[[str], bool]) -> Iterator[str]:
        """The tree's files and links (relative), not descending into ignored directories."""
        for top, dirs, names in os.walk(self.root, followlinks=False):
            rel_top = os.path.relpath(top, self.root)
            prefix = "" if rel_top == "." else rel_top.replace(os.sep, "/") + "/"
            keep = []
            for name in dirs:
                rel = prefix + name
                if os.path.islink(os.path.join(top, name)):
                    yield rel  # a link to a directory is an entry, not a directory
                elif not (always_ignored(rel + "/-") or skip(rel + "/-")):
                    keep.append(name)
            dirs[:] = keep
            for name in names:
                yield prefix + name

    def _commit(
        self, files: list[FileSpec], staged: dict[str, Path], skip: Callable[[str], bool]
    ) -> tuple[int, int]:
        wanted = {f.path: f for f in files if not skip(f.path)}
        deleted = 0
        for path in list(self._existing(skip)):
            if path not in wanted and not skip(path):
                with contextlib.suppress(FileNotFoundError):
                    (self.root / path).unlink()
                self._state.pop(path, None)
                deleted += 1
        written = 0
        for entry in wanted.values():
            if entry.link is None and entry.path not in staged:
                self._fix_mode(entry)
                continue
            dest = self._make_parents(entry.path)
            if dest.is_dir() and not dest.is_symlink():
                shutil.rmtree(dest)
            if entry.link is not None:
                if dest.is_symlink() and os.readlink(dest) == entry.link:
                    continue
                with contextlib.suppress(FileNotFoundError):
                    dest.unlink()
                os.symlink(entry.link, dest)
            else:
                source = staged[entry.path]
                os.chmod(source, entry.mode if entry.mode is not None else 0o644)
                self._chown(source)
                os.replace(source, dest)
                st = os.lstat(dest)
                self._state[entry.path] = _Cached(entry.sha256, st.st_size, st.st_mtime_ns)
            self._chown(dest)
            written += 1
        return written, deleted


def _hash_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1024 * 1024):
            digest.update(block)
    return digest.hexdigest()
