"""What a synced path may be, and which paths a build workspace never takes from a sync.

Pure (no I/O, no trio). A manifest path is relative POSIX, ``/``-separated, without empty,
``.`` or ``..`` segments, backslashes or NULs (the SDK sends exactly that). A symlink's target
must be relative and resolve inside the root from the link's directory (the SDK's own
``validateSymlinkTarget`` rule). Ignored, never written nor deleted by a sync: any ``.gradle``
and ``.kotlin`` directory, any ``build`` directory that is not inside a ``src`` directory (a
Java package may be called ``build``), any ``local.properties``, and what the tree's root
``.gitignore`` ignores (`GitIgnore`: the common subset of gitignore patterns).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable
from typing import Final

from .errors import BuildError, BuildReason

__all__ = ["GitIgnore", "always_ignored", "check_link", "check_path", "glob_regex"]

MAX_PATH: Final = 4096
MAX_SEGMENT: Final = 255
_IGNORED_DIRS: Final = frozenset({".gradle", ".kotlin"})
_IGNORED_FILES: Final = frozenset({"local.properties"})


def _bad(message: str) -> BuildError:
    return BuildError(BuildReason.BAD_REQUEST, message)


def check_path(path: object) -> str:
    """*path* if it is a safe relative path inside the root, else `BuildError`."""
    if not isinstance(path, str) or not path:
        raise _bad("a manifest path must be a non-empty string")
    if len(path) > MAX_PATH:
        raise _bad(f"path {path[:64]!r}... is longer than {MAX_PATH}")
    if "\\" in path or "\x00" in path:
        raise _bad(f"path {path!r} holds a backslash or a NUL")
    if path.startswith("/"):
        raise _bad(f"path {path!r} is absolute")
    for segment in path.split("/"):
        if segment in ("", ".", ".."):
            raise _bad(f"path {path!r} has an empty, '.' or '..' segment")
        if len(segment) > MAX_SEGMENT:
            raise _bad(f"path {path!r} has a segment longer than {MAX_SEGMENT}")
    return path


def check_link(path: str, target: object) -> str:
    """A symlink's *target* if it is relative and stays inside the root, else `BuildError`."""
    if not isinstance(target, str) or not target:
        raise _bad(f"symlink {path!r}: the target must be a non-empty string")
    if "\\" in target or "\x00" in target or len(target) > MAX_PATH:
        raise _bad(f"symlink {path!r}: bad target {target[:64]!r}")
    if target.startswith("/"):
        raise _bad(f"symlink {path!r} -> {target!r}: absolute targets are refused")
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
    if resolved in (".", "..") or resolved.startswith("../"):
        raise _bad(f"symlink {path!r} -> {target!r} points outside the root")
    return target


def always_ignored(path: str) -> bool:
    """The fixed ignores of a Gradle workspace (module docstring)."""
    segments = path.split("/")
    if segments[-1] in _IGNORED_FILES:
        return True
    for index, segment in enumerate(segments[:-1]):
        if segment in _IGNORED_DIRS:
            return True
        if segment == "build" and "src" not in segments[:index]:
            return True
    return False


def glob_regex(pattern: str) -> re.Pattern[str]:
    """A ``/``-separated glob (``*``, ``?``, ``**``) as a regex matching whole paths."""
    return re.compile(_translate(pattern.lstrip("/")) + "$")


def _translate(pattern: str) -> str:
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return "".join(out)


class GitIgnore:
    """The root ``.gitignore``'s patterns: comments, ``!`` negation (the last match wins),
    a trailing ``/`` for directories only, a ``/`` elsewhere anchoring to the root, ``*``,
    ``?`` and ``**``. Character classes and escapes are not interpreted."""

    def __init__(self, lines: Iterable[str] = ()) -> None:
        self._rules: list[tuple[re.Pattern[str], bool, bool]] = []
        for raw in lines:
            line = raw.rstrip("\r\n").rstrip()
            if not line or line.startswith("#"):
                continue
            negate = line.startswith("!")
            if negate:
                line = line[1:]
            dir_only = line.endswith("/")
            line = line.rstrip("/")
            if not line:
                continue
            anchored = "/" in line
            body = _translate(line.lstrip("/"))
            regex = body if anchored else f"(?:.*/)?{body}"
            self._rules.append((re.compile(f"{regex}$"), negate, dir_only))

    @classmethod
    def parse(cls, text: str) -> GitIgnore:
        return cls(text.splitlines())

    def ignores(self, path: str) -> bool:
        """Whether *path* (a file) or one of its parent directories is ignored."""
        if not self._rules:
            return False
        segments = path.split("/")
        for end in range(1, len(segments) + 1):
            if self._match("/".join(segments[:end]), is_dir=end < len(segments)):
                return True
        return False

    def _match(self, path: str, *, is_dir: bool) -> bool:
        ignored = False
        for regex, negate, dir_only in self._rules:
            if dir_only and not is_dir:
                continue
            if regex.match(path):
                ignored = not negate
        return ignored
