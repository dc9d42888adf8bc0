"""`logcat` as tools call it through `adb shell` / `adb logcat` (docs/adb.md, "Shell commands").

Supported: ``-d`` (dump and exit), ``-c`` (clear: later reads start after what was there),
``-t N`` / ``-T N`` (the last N lines; ``-t`` exits, ``-T`` follows), ``-m N`` (exit after N
lines), ``-s`` (silence everything not named), filter specs ``TAG:P`` and ``*:P`` with the
priorities ``V D I W E F S``, ``-e`` / ``--regex`` (a Python regular expression on the message),
``-v FORMAT`` with the formats ``brief process tag thread raw time threadtime long``
(modifiers such as ``color`` or ``epoch`` are accepted and ignored), ``-b BUFFER`` (every buffer
is the one log), ``-g`` (the buffer's size). Without ``-d``/``-t`` it follows until the client
closes the stream, as on a device.

The log is the device's bounded ring buffer; every line has pid and tid 1000 (the virtual
device has no processes) and a time of ``01-01`` plus the time since the device started.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable, Sequence
from typing import Final

import attrs
import trio

from ..drivers.base import LogEntry
from .interpreter import CommandIO, Interpreter, ParseError, command

__all__ = ["LogcatOptions", "format_line", "parse_logcat"]

PRIORITIES: Final = "VDIWEFS"
_FORMATS: Final = frozenset(
    {"brief", "process", "tag", "thread", "raw", "time", "threadtime", "long"}
)
_MODIFIERS: Final = frozenset(
    {"color", "descriptive", "epoch", "monotonic", "printable", "uid", "usec", "UTC", "year",
     "zone", "nsec"}
)  # fmt: skip
_VALUED: Final = frozenset({"-v", "-b", "-t", "-T", "-m", "-e", "--regex", "-f", "-r", "-n"})
_PID: Final = 1000

#: Per device: the last log sequence number `logcat -c` cleared.
_CLEARED: weakref.WeakKeyDictionary[object, int] = weakref.WeakKeyDictionary()
#: Per shell (interpreter): what ``export`` set. ``adb logcat`` runs
#: ``export ANDROID_LOG_TAGS="..."; exec logcat ...``: the tags are logcat's default filter.
_EXPORTED: weakref.WeakKeyDictionary[Interpreter, dict[str, str]] = weakref.WeakKeyDictionary()
_LOG_TAGS: Final = "ANDROID_LOG_TAGS"


@attrs.define
class LogcatOptions:
    dump: bool = False
    clear: bool = False
    size: bool = False
    tail: int | None = None
    max_count: int | None = None
    format: str = "threadtime"
    regex: re.Pattern[str] | None = None
    filters: dict[str, str] = attrs.Factory(dict)  # tag -> lowest priority shown; "*" default


def _priority(spec: str) -> tuple[str, str]:
    tag, sep, level = spec.rpartition(":")
    if not sep:
        return spec, "V"
    level = level.upper()[:1]
    if level not in PRIORITIES:
        raise ParseError(f"logcat: invalid filter expression {spec!r}")
    return tag, level


def parse_logcat(argv: Sequence[str]) -> LogcatOptions:  # noqa: PLR0915 - one flat option loop
    """`LogcatOptions` from logcat's arguments; `ParseError` on bad ones."""
    opts = LogcatOptions()
    silent_default = False
    args = list(argv[1:])
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, inline = arg.partition("=")
        if arg.startswith("--") and eq:
            value: str | None = inline
        elif arg in _VALUED or (len(arg) > 2 and arg[:2] in _VALUED and not arg.startswith("--")):
            if len(arg) > 2 and arg[:2] in _VALUED:
                name, value = arg[:2], arg[2:]
            else:
                i += 1
                if i >= len(args):
                    raise ParseError(f"logcat: option {arg} requires an argument")
                value = args[i]
        else:
            value = None
        i += 1
        if name in ("-d",):
            opts.dump = True
        elif name == "-c":
            opts.clear = True
        elif name == "-g":
            opts.size = True
        elif name == "-s":
            silent_default = True
        elif name in ("-t", "-T") and value is not None:
            opts.tail = _count(value)
            opts.dump = opts.dump or name == "-t"
        elif name in ("-m", "--max-count") and value is not None:
            opts.max_count = _count(value)
        elif name in ("-e", "--regex") and value is not None:
            try:
                opts.regex = re.compile(value)
            except re.error as exc:
                raise ParseError(f"logcat: bad regex {value!r}: {exc}") from None
        elif name in ("-v", "--format") and value is not None:
            if value in _FORMATS:
                opts.format = value
            elif value not in _MODIFIERS:
                raise ParseError(f"logcat: unknown format {value!r}")
        elif name.startswith("-"):
            continue  # -b BUFFER, -B, -D, --pid=...: accepted, one buffer, one process
        else:
            tag, level = _priority(arg)
            opts.filters[tag] = level
    if silent_default:
        opts.filters.setdefault("*", "S")
    return opts


def _count(value: str) -> int:
    if not value.isdigit():
        raise ParseError(f"logcat: expected a count, got {value!r}")
    return int(value)


def shown(opts: LogcatOptions, entry: LogEntry) -> bool:
    level = opts.filters.get(entry.tag, opts.filters.get("*", "V"))
    if PRIORITIES.index(entry.level.value) < PRIORITIES.index(level):
        return False
    return opts.regex is None or opts.regex.search(entry.message) is not None


def _stamp(seconds: float) -> str:
    minutes, secs = divmod(seconds, 60)
    hours, minutes = divmod(int(minutes), 60)
    return f"01-01 {hours % 24:02d}:{minutes:02d}:{secs:06.3f}"


_LAYOUTS: Final[dict[str, Callable[[LogEntry], str]]] = {
    "threadtime": lambda e: (
        f"{_stamp(e.time)} {_PID:5d} {_PID:5d} {e.level.value} {e.tag:<8}: {e.message}\n"
    ),
    "brief": lambda e: f"{e.level.value}/{e.tag:<8}({_PID:5d}): {e.message}\n",
    "tag": lambda e: f"{e.level.value}/{e.tag:<8}: {e.message}\n",
    "process": lambda e: f"{e.level.value}({_PID:5d}) {e.message}  ({e.tag})\n",
    "thread": lambda e: f"{e.level.value}({_PID:5d}:{_PID:5d}) {e.message}\n",
    "raw": lambda e: f"{e.message}\n",
    "time": lambda e: f"{_stamp(e.time)} {e.level.value}/{e.tag:<8}({_PID:5d}): {e.message}\n",
    "long": lambda e: (
        f"[ {_stamp(e.time)} {_PID:5d}:{_PID:5d} {e.level.value}/{e.tag} ]\n{e.message}\n\n"
    ),
}


def format_line(entry: LogEntry, fmt: str = "threadtime") -> str:
    return _LAYOUTS[fmt](entry)


@command("export")
async def _export(sh: Interpreter, argv: Sequence[str], io: CommandIO) -> int:
    exported = _EXPORTED.setdefault(sh, {})
    for arg in argv[1:]:
        name, _, value = arg.partition("=")
        exported[name] = value.strip("'")
    await trio.lowlevel.checkpoint()
    return 0


@command("exec")
async def _exec(sh: Interpreter, argv: Sequence[str], io: CommandIO) -> int:
    return await sh.run_argv(argv[1:], io) if len(argv) > 1 else 0


@command("logcat")
async def _logcat(sh: Interpreter, argv: Sequence[str], io: CommandIO) -> int:
    try:
        opts = parse_logcat(argv)
        tags = _EXPORTED.get(sh, {}).get(_LOG_TAGS, "").split()
        if tags and not opts.filters:
            opts.filters = dict(_priority(tag) for tag in tags)
    except ParseError as exc:
        await io.err(f"{exc}\n")
        return 1
    device = sh.device
    if opts.clear:
        entries = device.logs()
        _CLEARED[device] = entries[-1].seq if entries else _CLEARED.get(device, 0)
        return 0
    if opts.size:
        await io.out(
            "main: ring buffer is 256 KiB (consumed), max entry is 5120 B, max payload is 4068 B\n"
        )
        return 0
    raw = device.logs(after=_CLEARED.get(device, 0))
    after = raw[-1].seq if raw else _CLEARED.get(device, 0)
    entries = [e for e in raw if shown(opts, e)]
    if opts.tail is not None:
        entries = entries[-opts.tail :] if opts.tail else []
    printed = 0
    while True:
        for entry in entries:
            await io.out(format_line(entry, opts.format))
            printed += 1
            if opts.max_count is not None and printed >= opts.max_count:
                return 0
        if opts.dump:
            return 0
        raw = await device.wait_logs(after=after)
        after = raw[-1].seq if raw else after
        entries = [e for e in raw if shown(opts, e)]
