"""``pm install-create / install-write / install-commit / install-abandon``: the install session
protocol the real ``adb install-multiple`` speaks (through ``exec:cmd package``, ``abb_exec:``
or ``exec:pm``, by the device's features), installing ONE app from all its split APKs.

    install-create [-S TOTAL] [options]   -> "Success: created install session [N]"
    install-write [-S SIZE] N NAME [-|PATH] -> the APK from stdin (SIZE bytes) or a device file
    install-commit N                       -> "Success", or "Failure [INSTALL_FAILED_...: why]"
    install-abandon N                      -> "Success"

A session's files are staged in the device's file system
(``/data/local/tmp/.install-session-N/``) and removed when it is committed or abandoned. At
commit every file must be an APK of the same package; exactly one is the base (no ``split``
name: ``split=`` in devyard-package.txt, ``split="..."`` in a text manifest, a ``split``
attribute in a binary one), the others are its splits. The base is installed (the virtual
device runs no code, so the splits are checked and their names kept: ``dumpsys package``
shows ``splits=[base, ...]``). At most `MAX_SESSIONS` sessions per device are open.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import struct
import weakref
import zipfile
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Final

import attrs
import trio

from ..drivers._errors import DeviceFileError, InstallError
from ..drivers._shared.packages import read_package
from ..drivers.base import LogLevel, Platform
from .interpreter import CommandIO, Interpreter, Stdin, device_path

__all__ = ["MAX_SESSIONS", "SESSION_VERBS", "pm_session", "splits_of"]

SESSION_VERBS: Final = frozenset(
    {"install-create", "install-write", "install-commit", "install-abandon"}
)
MAX_SESSIONS: Final = 8
_MAX_FILES: Final = 64
_NAME: Final = re.compile(r"^[A-Za-z0-9._+-]{1,128}$")
_SPLIT_TEXT: Final = re.compile(r'\bsplit\s*=\s*"([^"]+)"')
_ids = itertools.count(1000)


@attrs.define
class _Session:
    session_id: int
    files: dict[str, str] = attrs.Factory(dict)  # name -> staged device path

    @property
    def directory(self) -> str:
        return f"/data/local/tmp/.install-session-{self.session_id}"


_SESSIONS: weakref.WeakKeyDictionary[object, dict[int, _Session]] = weakref.WeakKeyDictionary()
_SPLITS: weakref.WeakKeyDictionary[object, dict[str, tuple[str, ...]]] = weakref.WeakKeyDictionary()


def splits_of(device: object, app_id: str) -> tuple[str, ...]:
    """The split names the last session install of *app_id* on *device* had."""
    return _SPLITS.get(device, {}).get(app_id, ())


class _Failure(Exception):
    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


async def pm_session(sh: Interpreter, verb: str, args: Sequence[str], io: CommandIO) -> int:
    sessions = _SESSIONS.setdefault(sh.device, {})
    try:
        if verb == "install-create":
            if len(sessions) >= MAX_SESSIONS:
                raise _Failure("INSTALL_FAILED_INTERNAL_ERROR", "too many open install sessions")
            session = _Session(next(_ids))
            sessions[session.session_id] = session
            await io.out(f"Success: created install session [{session.session_id}]\n")
            return 0
        if verb == "install-write":
            written = await _write(sh, sessions, args, io.stdin)
            await io.out(f"Success: streamed {written} bytes\n")
            return 0
        session = sessions.pop(_session_id(sessions, args[-1] if args else ""))
        try:
            if verb == "install-commit":
                app_id, splits = await _commit(sh, session)
                _SPLITS.setdefault(sh.device, {})[app_id] = splits
                sh.device.log(LogLevel.INFO, "PackageManager",
                              f"installed {app_id} (base + {len(splits)} split(s))")  # fmt: skip
        finally:
            await _remove(sh, session)
        await io.out("Success\n")
        return 0
    except _Failure as exc:
        await io.out(f"Failure [{exc.code}: {exc.detail}]\n")
        return 1


def _session_id(sessions: dict[int, _Session], text: str) -> int:
    if not text.isdigit() or int(text) not in sessions:
        raise _Failure("INSTALL_FAILED_INVALID_SESSION", f"no open install session {text!r}")
    return int(text)


async def _write(
    sh: Interpreter, sessions: dict[int, _Session], args: Sequence[str], stdin: Stdin
) -> int:
    rest, size = list(args), None
    while rest and rest[0].startswith("-") and rest[0] != "-":
        flag = rest.pop(0)
        if flag == "-S" and rest:
            size = rest.pop(0)
        elif flag == "--user" and rest:
            rest.pop(0)
    if len(rest) < 2:
        raise _Failure(
            "INSTALL_FAILED_INVALID_APK", "usage: install-write [-S SIZE] N NAME [-|PATH]"
        )
    session = sessions[_session_id(sessions, rest[0])]
    name, source = rest[1], (rest[2] if len(rest) > 2 else "-")
    if not _NAME.match(name):
        raise _Failure("INSTALL_FAILED_INVALID_APK", f"bad split file name {name!r}")
    if len(session.files) >= _MAX_FILES and name not in session.files:
        raise _Failure("INSTALL_FAILED_INVALID_APK", f"more than {_MAX_FILES} files")
    staged = f"{session.directory}/{name}"
    dev = sh.device
    try:
        if source == "-":
            if size is None or not size.isdigit():
                raise _Failure("INSTALL_FAILED_INVALID_APK", "stdin needs -S SIZE")
            written = await dev.push(staged, _stdin_bytes(stdin, int(size)))
        else:
            written = await dev.push(staged, await dev.pull(device_path(source)))
    except (InstallError, DeviceFileError) as exc:
        raise _Failure("INSTALL_FAILED_INVALID_APK", str(exc)) from exc
    session.files[name] = staged
    return written


async def _stdin_bytes(stdin: Stdin, size: int) -> AsyncIterator[bytes]:
    left = size
    while left > 0:
        chunk = await stdin.read()
        if not chunk:
            raise InstallError(f"the APK ended {left} bytes short of -S {size}")
        yield chunk[:left]
        left -= len(chunk)


async def _commit(sh: Interpreter, session: _Session) -> tuple[str, tuple[str, ...]]:
    if not session.files:
        raise _Failure("INSTALL_FAILED_INVALID_APK", "the session has no APK")
    dev = sh.device
    parsed: list[tuple[str, Path, str, str | None]] = []
    for name, staged in session.files.items():
        host = dev.resolve_path(staged)
        try:
            package = await trio.to_thread.run_sync(read_package, Platform.ANDROID, host)
            split = await trio.to_thread.run_sync(split_name, host)
        except InstallError as exc:
            raise _Failure("INSTALL_PARSE_FAILED_NOT_APK", f"{name}: {exc}") from exc
        parsed.append((name, host, package.app_id, split))
    packages = {app_id for _, _, app_id, _ in parsed}
    if len(packages) > 1:
        raise _Failure(
            "INSTALL_FAILED_INVALID_APK",
            f"split APKs of different packages: {', '.join(sorted(packages))}",
        )
    bases = [p for p in parsed if p[3] is None]
    if not bases:
        raise _Failure("INSTALL_FAILED_MISSING_SPLIT", "no base APK (every file is a split)")
    if len(bases) > 1:
        names = ", ".join(p[0] for p in bases)
        raise _Failure("INSTALL_FAILED_INVALID_APK", f"more than one base APK: {names}")
    splits = [p[3] for p in parsed if p[3] is not None]
    if len(set(splits)) != len(splits):
        raise _Failure("INSTALL_FAILED_INVALID_APK", "the same split twice")
    try:
        app = await dev.install(bases[0][1])
    except InstallError as exc:
        raise _Failure("INSTALL_FAILED_INVALID_APK", str(exc)) from exc
    return app.app_id, tuple(sorted(s for s in splits if s is not None))


async def _remove(sh: Interpreter, session: _Session) -> None:
    with contextlib.suppress(DeviceFileError):  # nothing was written
        await sh.device.remove(session.directory, recursive=True)


def split_name(path: Path) -> str | None:
    """The split name an APK declares, None for a base APK (blocking: zip I/O)."""
    try:
        with zipfile.ZipFile(path) as apk:
            names = set(apk.namelist())
            if "devyard-package.txt" in names:
                text = apk.read("devyard-package.txt")[: 1 << 20].decode("utf-8", "replace")
                for line in text.splitlines():
                    key, sep, value = line.partition("=")
                    if sep and key.strip() == "split" and value.strip():
                        return value.strip()
                return None
            if "AndroidManifest.xml" in names:
                data = apk.read("AndroidManifest.xml")[: 1 << 20]
                if data[:2] == b"\x03\x00":
                    return _binary_split(data)
                match = _SPLIT_TEXT.search(data.decode("utf-8", "replace"))
                return match.group(1) if match else None
    except (OSError, zipfile.BadZipFile) as exc:
        raise InstallError(f"INSTALL_PARSE_FAILED_NOT_APK: {exc}") from exc
    return None


def _binary_split(data: bytes) -> str | None:
    """The ``split`` attribute of a binary manifest's ``<manifest>`` element."""
    from ..drivers._shared import packages  # noqa: PLC0415 - its AXML string pool reader

    strings: list[str] = []
    try:
        _type, header_size, _size = struct.unpack_from("<HHI", data, 0)
        offset = header_size
        while offset + 8 <= len(data):
            chunk_type, chunk_header, chunk_size = struct.unpack_from("<HHI", data, offset)
            if chunk_size < 8:
                break
            if chunk_type == 0x0001:
                strings = packages._string_pool(data, offset)
            elif chunk_type == 0x0102:
                ext = offset + chunk_header
                _ns, name, attr_start, attr_size, count = struct.unpack_from("<IIHHH", data, ext)
                if name < len(strings) and strings[name] == "manifest":
                    for i in range(count):
                        at = ext + attr_start + i * attr_size
                        _a, attr, raw, *_ = struct.unpack_from("<IIIHBBI", data, at)
                        if attr < len(strings) and strings[attr] == "split" and raw < len(strings):
                            return str(strings[raw])
                    return None
            offset += chunk_size
    except (struct.error, IndexError, UnicodeDecodeError):
        return None
    return None
