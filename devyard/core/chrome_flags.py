"""Chrome flag entries of ``spec.initialAssets`` (spec 2.1, Android): what a browser sandbox takes.

An entry ``{kind: "Configuration", configuration: {kind: "ChromeFlag", chromeFlag: TEXT}}``
carries one flag in one of two forms (docs/sandbox.md, "Chrome flags"):

- ``name@index``: a chrome://flags entry, the form Android's Chrome keeps in its ``Local
  State`` (``browser.enabled_labs_experiments``): the host writes it there before the browser
  starts, as chrome://flags would;
- ``--switch`` or ``--switch=value``: a command-line switch, added to the browser's command line
  unless it would break the sandbox's isolation or its limits (`REFUSED_SWITCHES`: where the
  debugging port listens, the proxy, the profile, the process sandbox, the memory limits and
  anything that loads code or files from the host).

Pure: the server checks every entry at create time (a refused flag is a 422 naming it), the host
parses the same way when it builds the command line.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

import attrs

__all__ = [
    "REFUSED_SWITCHES",
    "ChromeFlag",
    "ChromeFlagError",
    "ChromeFlagProblem",
    "chrome_flags",
    "parse_chrome_flag",
]

#: Switches a spec may not set (prefix match on the switch name, without its ``--``).
REFUSED_SWITCHES: Final = (
    "remote-debugging",  # -address, -port, -pipe, -targets: where CDP listens is the host's
    "remote-allow-origins",
    "proxy",  # -server, -pac-url, -bypass-list, -auto-detect: the network policy's proxy
    "no-proxy-server",
    "host-resolver-rules",
    "host-rules",
    "user-data-dir",
    "disk-cache-dir",
    "crash-dumps-dir",
    "no-sandbox",
    "disable-setuid-sandbox",
    "disable-namespace-sandbox",
    "disable-seccomp-filter-sandbox",
    "no-zygote",
    "single-process",
    "in-process-gpu",
    "renderer-cmd-prefix",
    "gpu-launcher",
    "utility-cmd-prefix",
    "browser-subprocess-path",
    "load-extension",
    "disable-extensions-except",
    "enable-logging",
    "log-file",
    "v",
    "vmodule",
    "js-flags",  # the heap limit is set here
    "renderer-process-limit",
    "headless",
    "user-agent-client-hint",
    "allow-file-access",
    "file-url-path-alias",
    "register-pepper-plugins",
    "ppapi",
    "enable-automation",
)

_SWITCH: Final = re.compile(r"^--([a-z0-9][a-z0-9-]{0,127})(?:=([^\x00-\x1f\x7f]{0,1024}))?$")
_LAB: Final = re.compile(r"^([a-z0-9][a-z0-9-_]{0,127})@([0-9]{1,3})$")


class ChromeFlagProblem(enum.Enum):
    MALFORMED = "malformed"
    REFUSED = "refused"


class ChromeFlagError(ValueError):
    """A flag the sandbox does not take; ``message`` names it and says why."""

    def __init__(self, problem: ChromeFlagProblem, message: str) -> None:
        super().__init__(message)
        self.problem = problem
        self.message = message


@attrs.frozen
class ChromeFlag:
    """A parsed flag: a ``switch`` (name, value or None) or a chrome://flags ``lab`` entry."""

    text: str
    switch: str | None = None
    value: str | None = None
    lab: str | None = None

    @property
    def argument(self) -> str | None:
        """The command-line argument (None for a chrome://flags entry)."""
        if self.switch is None:
            return None
        return f"--{self.switch}" if self.value is None else f"--{self.switch}={self.value}"


def parse_chrome_flag(text: str) -> ChromeFlag:
    """*text* as a flag, or `ChromeFlagError`."""
    lab = _LAB.fullmatch(text)
    if lab is not None:
        return ChromeFlag(text=text, lab=text)
    switch = _SWITCH.fullmatch(text)
    if switch is None:
        raise ChromeFlagError(
            ChromeFlagProblem.MALFORMED,
            f"chrome flag {text!r} is neither a chrome://flags entry (name@index) "
            "nor a switch (--name or --name=value)",
        )
    name = switch.group(1)
    if any(name == r or name.startswith(r + "-") for r in REFUSED_SWITCHES):
        raise ChromeFlagError(
            ChromeFlagProblem.REFUSED,
            f"chrome flag --{name} is not allowed: it would change the sandbox's isolation, "
            "network or limits (docs/sandbox.md)",
        )
    return ChromeFlag(text=text, switch=name, value=switch.group(2))


def chrome_flags(initial_assets: Iterable[Mapping[str, Any]]) -> list[ChromeFlag]:
    """The ChromeFlag configuration entries of ``spec.initialAssets``, parsed, in order."""
    flags: list[ChromeFlag] = []
    for entry in initial_assets:
        if entry.get("kind") != "Configuration":
            continue
        configuration = entry.get("configuration") or {}
        if configuration.get("kind") == "ChromeFlag":
            flags.append(parse_chrome_flag(str(configuration.get("chromeFlag", ""))))
    return flags
