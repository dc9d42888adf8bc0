"""Reading what adb and the device's tools print. Pure functions, no I/O.

The formats are those of a stock emulator image (toybox ``ls``, ``getprop``, ``wm``,
``settings``, ``pm``, ``logcat -v threadtime``) and match what devyard's virtual device prints,
which is how they are tested here.
"""

from __future__ import annotations

import calendar
import errno
import os
import re
import stat
import struct
import time
from typing import Final

import attrs

from ..base import FileKind, LogLevel

__all__ = [
    "LsLine",
    "errno_in",
    "file_kind",
    "mode_from_string",
    "parse_getprop",
    "parse_logcat_line",
    "parse_ls_line",
    "parse_packages",
    "parse_settings_list",
    "parse_wm",
    "png_size",
]

_GETPROP: Final = re.compile(r"^\[(?P<key>[^\]]+)\]: \[(?P<value>.*)\]$")
_WM: Final = re.compile(r"^(?P<which>Physical|Override) (?P<what>size|density): (?P<value>\S+)$")
# "05-01 10:00:00.123  1234  1234 I Tag     : message" (threadtime; also devyard's virtual)
_LOGCAT: Final = re.compile(
    r"^\d\d-\d\d \d\d:\d\d:\d\d\.\d+\s+\d+\s+\d+ (?P<level>[VDIWEFA]) (?P<tag>.*?)\s*: ?"
    r"(?P<message>.*)$"
)
# "-rw-rw---- 1 root sdcard_rw 5 2024-05-01 10:00 name" (toybox ls -l)
_LS: Final = re.compile(
    r"^(?P<mode>[-dlcbps][-rwxsStT]{9})[.+@]?\s+\d+\s+\S+\s+\S+\s+(?P<size>\d+|\d+,\s*\d+)\s+"
    r"(?P<date>\d{4}-\d\d-\d\d) (?P<time>\d\d:\d\d)\s(?P<name>.*)$"
)
_LEVELS: Final = {"V": LogLevel.VERBOSE, "D": LogLevel.DEBUG, "I": LogLevel.INFO,
                  "W": LogLevel.WARN, "E": LogLevel.ERROR, "F": LogLevel.ERROR,
                  "A": LogLevel.ERROR}  # fmt: skip
_TYPE_BITS: Final = {"-": stat.S_IFREG, "d": stat.S_IFDIR, "l": stat.S_IFLNK, "c": stat.S_IFCHR,
                     "b": stat.S_IFBLK, "p": stat.S_IFIFO, "s": stat.S_IFSOCK}  # fmt: skip
# Error texts adb and toybox print, longest first so "Not a directory" wins over shorter ones.
_ERRNO_TEXTS: Final = sorted(
    ((os.strerror(code), code) for code in (
        errno.ENOENT, errno.EISDIR, errno.ENOTDIR, errno.EEXIST, errno.EACCES, errno.EPERM,
        errno.ENOTEMPTY, errno.EROFS, errno.ENOSPC, errno.EINVAL,
    )),
    key=lambda item: -len(item[0]),
)  # fmt: skip


def parse_getprop(text: str) -> dict[str, str]:
    """``getprop`` with no arguments: ``[key]: [value]`` lines."""
    props: dict[str, str] = {}
    for line in text.splitlines():
        match = _GETPROP.match(line.strip())
        if match:
            props[match["key"]] = match["value"]
    return props


def parse_wm(text: str, what: str) -> str | None:
    """The value of ``wm size`` / ``wm density``; an override beats the physical value."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        match = _WM.match(line.strip())
        if match and match["what"] == what:
            found[match["which"]] = match["value"]
    return found.get("Override") or found.get("Physical")


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from a PNG's IHDR; ValueError if it is no PNG."""
    if len(data) < 24 or data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
        raise ValueError("not a PNG")
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


def parse_logcat_line(line: str) -> tuple[LogLevel, str, str] | None:
    match = _LOGCAT.match(line.rstrip("\r\n"))
    if match is None:
        return None
    return _LEVELS[match["level"]], match["tag"], match["message"]


def mode_from_string(text: str) -> int:
    """``drwxr-x--x`` -> st_mode (type bits included); the inverse of `stat.filemode`."""
    mode = _TYPE_BITS.get(text[0], 0)
    bits = (stat.S_IRUSR, stat.S_IWUSR, stat.S_IXUSR, stat.S_IRGRP, stat.S_IWGRP,
            stat.S_IXGRP, stat.S_IROTH, stat.S_IWOTH, stat.S_IXOTH)  # fmt: skip
    for char, bit in zip(text[1:10], bits, strict=True):
        if char not in "-ST":
            mode |= bit
    specials = {3: (stat.S_ISUID, "sS"), 6: (stat.S_ISGID, "sS"), 9: (stat.S_ISVTX, "tT")}
    for index, (bit, chars) in specials.items():
        if text[index] in chars:
            mode |= bit
    return mode


def file_kind(mode: int) -> FileKind:
    if stat.S_ISREG(mode):
        return FileKind.FILE
    if stat.S_ISDIR(mode):
        return FileKind.DIRECTORY
    if stat.S_ISLNK(mode):
        return FileKind.SYMLINK
    return FileKind.OTHER


@attrs.frozen
class LsLine:
    name: str
    mode: int
    size: int
    mtime: int  # minute precision: toybox ls prints no seconds


def parse_ls_line(line: str) -> LsLine | None:
    """One line of ``ls -l``; None for ``total N`` and anything else that is no entry."""
    match = _LS.match(line.rstrip("\r\n"))
    if match is None:
        return None
    mode = mode_from_string(match["mode"])
    name = match["name"]
    if stat.S_ISLNK(mode) and " -> " in name:
        name = name.split(" -> ", 1)[0]
    size = int(match["size"]) if match["size"].isdigit() else 0  # devices print "maj, min"
    when = time.strptime(f"{match['date']} {match['time']}", "%Y-%m-%d %H:%M")
    return LsLine(name, mode, size, calendar.timegm(when))


def errno_in(text: str) -> int | None:
    """The errno whose message appears in an error text (``ls: /x: No such file...``)."""
    lowered = text.lower()
    for message, code in _ERRNO_TEXTS:
        if message.lower() in lowered:
            return code
    if "does not exist" in lowered:  # adb pull: "remote object '/x' does not exist"
        return errno.ENOENT
    return None


def parse_packages(text: str) -> list[str]:
    """``pm list packages``: ``package:NAME`` lines."""
    return [
        line.strip().removeprefix("package:")
        for line in text.splitlines()
        if line.strip().startswith("package:")
    ]


def parse_settings_list(text: str) -> dict[str, str]:
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key:
            values[key] = value
    return values
