"""The macOS sandbox of an Xcode build: a ``sandbox-exec`` (Seatbelt) profile (docs/xcode.md).

macOS has no bubblewrap, so the xcode driver runs builds in the keeper's *direct* mode and
wraps them in ``sandbox-exec -f PROFILE``. The profile (`profile`, pure) allows everything a
build reads and runs (Xcode's toolchain reads all over the system and talks to many system
services: a deny-by-default profile would need Apple's private service lists), and confines
what it changes:

- **files**: writes only under the instance's workspace (which holds ``build/DerivedData``,
  the ``-derivedDataPath`` the driver passes), the DerivedData directory named on its own,
  the build's ``HOME``/``TMPDIR`` and the exec's secrets directory (the temporary keychain),
  plus the few device files every tool writes (``/dev/null``, ``/dev/tty``, ``/dev/fd/N``...);
- **network**: no IP traffic in or out (``spec.buildNetwork`` without entries); with an
  allowlist, only ``localhost:PORT``, where the keeper's relay serves hostd's filtering proxy
  (sandbox_net.py), and that proxy's Unix socket. Unix sockets to system services stay open.

It cannot be run here (Linux): tests check the generated text and that ``sandbox-exec`` is
called with it, through a fake that records its argv (tests/builds/fakes/sandbox-exec).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Final

__all__ = ["DEVICE_FILES", "profile", "quote"]

#: Device files any tool may write.
DEVICE_FILES: Final = ("/dev/null", "/dev/zero", "/dev/dtracehelper", "/dev/random")


def quote(path: str | Path) -> str:
    """A Seatbelt string literal (the profile language is Scheme: backslash and quote escaped)."""
    text = str(path)
    if any(ord(c) < 32 for c in text):
        raise ValueError(f"a sandbox path holds a control character: {text!r}")
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def profile(
    *,
    writable: Sequence[Path],
    proxy_port: int | None = None,
    proxy_socket: Path | None = None,
) -> str:
    """The profile: writes only under *writable* (real, resolved paths: Seatbelt matches the
    path after symlinks, so ``/tmp`` is ``/private/tmp``); no IP network, or only
    ``localhost:proxy_port`` and *proxy_socket* with an allowlist."""
    lines = [
        "(version 1)",
        ";; devyard: an Xcode build (generated; docs/xcode.md)",
        "(allow default)",
        "(deny file-write*)",
        "(allow file-write*",
    ]
    lines += [f"    (subpath {quote(path)})" for path in writable]
    lines += [f"    (literal {quote(device)})" for device in DEVICE_FILES]
    lines += ['    (regex #"^/dev/tty")', '    (regex #"^/dev/fd/"))']
    lines += [
        '(deny network-outbound (remote ip "*:*"))',
        '(deny network-inbound (local ip "*:*"))',
        '(deny network-bind (local ip "*:*"))',
    ]
    if proxy_port is not None:
        if not 0 < proxy_port < 65536:
            raise ValueError(f"bad proxy port {proxy_port}")
        lines += [
            ";; spec.buildNetwork.allow: only through the allowlist proxy",
            f'(allow network-bind (local ip "localhost:{proxy_port}"))',
            f'(allow network-inbound (local ip "localhost:{proxy_port}"))',
            f'(allow network-outbound (remote ip "localhost:{proxy_port}"))',
        ]
        if proxy_socket is not None:
            socket = f"(path-literal {quote(proxy_socket)})"
            lines.append(f"(allow network-outbound (remote unix-socket {socket}))")
    return "\n".join(lines) + "\n"
