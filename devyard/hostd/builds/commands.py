"""``POST {apiUrl}/exec`` bodies: what to run, checked, as an `ExecPlan` (pure).

``{command: "gradlebuild", tasks?, args?, env?, projectPath?, artifacts?, timeoutSeconds?}``
runs Debian's ``gradle`` (``--no-daemon --console=plain --build-cache``: the organization's
build cache, cas.py) with *tasks* (default ``build``:
plain JVM projects; Android's ``assembleDebug`` needs Google's repositories) then *args*, in
*projectPath* (default the workspace root). ``{command: "run", commandLine, cwd?, env?,
timeoutSeconds?, artifacts?}`` runs ``/bin/sh -c commandLine``. ``xcodebuild`` needs a macOS
host. ``env`` is a list of ``"NAME=value"`` strings or ``{name, value}`` objects, or an object.
``network`` is ``"none"`` (the default; the only value until allowlists come).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

import attrs

from .errors import BuildError, BuildReason
from .paths import check_path
from .sandbox import GRADLE_HOME, WORKSPACE
from .webhook import WebhookSpec, parse_webhook

__all__ = ["DEFAULT_ARTIFACTS", "ExecPlan", "Upload", "plan_exec"]

DEFAULT_ARTIFACTS: Final = (
    "**/build/libs/*.jar",
    "**/build/outputs/**/*.apk",
    "**/build/outputs/**/*.aab",
)
DEFAULT_TIMEOUT_S: Final = 3600.0
MAX_TIMEOUT_S: Final = 6 * 3600.0
_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TASK: Final = re.compile(r"[A-Za-z0-9_:.\-]+")
_MAX_ITEMS: Final = 256
_MAX_STRING: Final = 64 * 1024
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f]")
BASE_ENV: Final = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/tmp",  # noqa: S108 - inside the sandbox: its private tmpfs
    "TMPDIR": "/tmp",  # noqa: S108
    "LANG": "C.UTF-8",
    "GRADLE_USER_HOME": GRADLE_HOME,
}


def _bad(message: str) -> BuildError:
    return BuildError(BuildReason.BAD_REQUEST, message)


@attrs.frozen
class ExecPlan:
    kind: str  # "gradlebuild" | "run"
    argv: tuple[str, ...]  # inside the sandbox
    display: str  # the ``command`` event's text
    cwd: str  # inside the sandbox
    env: Mapping[str, str]
    timeout_s: float
    artifacts: tuple[str, ...]  # globs relative to the workspace root
    network: bool = False
    webhook: WebhookSpec | None = None
    upload: Upload | None = None


@attrs.frozen
class Upload:
    """``upload: {assetName, path?}``: after a success, the artifact at *path* (default: the
    first collected) becomes the organization's asset *asset_name* (its bytes replaced)."""

    asset_name: str
    path: str | None = None


def _upload(value: object) -> Upload | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _bad("upload must be an object {assetName, path?}")
    name, path = value.get("assetName"), value.get("path")
    if not isinstance(name, str) or not 0 < len(name) <= 255 or _CONTROL.search(name):
        raise _bad("upload.assetName must be 1 to 255 characters without control characters")
    return Upload(name, None if path is None else check_path(path))


def _strings(value: object, what: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > _MAX_ITEMS:
        raise _bad(f"{what} must be a list of at most {_MAX_ITEMS} strings")
    for item in value:
        if not isinstance(item, str) or len(item) > _MAX_STRING or "\x00" in item:
            raise _bad(f"{what} must hold strings (no NUL, at most {_MAX_STRING} characters)")
    return list(value)


def _env(value: object) -> dict[str, str]:
    pairs: list[tuple[object, object]] = []
    if value is None:
        pass
    elif isinstance(value, dict):
        pairs = list(value.items())
    elif isinstance(value, list) and len(value) <= _MAX_ITEMS:
        for item in value:
            if isinstance(item, str) and "=" in item:
                key, _, val = item.partition("=")
                pairs.append((key, val))
            elif isinstance(item, dict):
                pairs.append((item.get("name"), item.get("value")))
            else:
                raise _bad("env entries are 'NAME=value' strings or {name, value} objects")
    else:
        raise _bad("env must be a list or an object")
    env: dict[str, str] = {}
    for name, text in pairs:
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise _bad(f"env: bad variable name {name!r}")
        if not isinstance(text, str) or "\x00" in text or len(text) > _MAX_STRING:
            raise _bad(f"env: the value of {name} must be a string without NUL")
        env[name] = text
    return env


def _timeout(body: Mapping[str, Any]) -> float:
    value = body.get("timeoutSeconds")
    if value is None:
        return DEFAULT_TIMEOUT_S
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 < value <= MAX_TIMEOUT_S
    ):
        raise _bad(f"timeoutSeconds must be a number in (0, {MAX_TIMEOUT_S:g}]")
    return float(value)


def _inside(path: object, what: str) -> str:
    if path is None or path in ("", "."):
        return WORKSPACE
    return f"{WORKSPACE}/{check_path(str(path).strip('/') if isinstance(path, str) else path)}"


def _artifacts(body: Mapping[str, Any], default: tuple[str, ...]) -> tuple[str, ...]:
    if "artifacts" not in body:
        return default
    globs = _strings(body["artifacts"], "artifacts")
    for pattern in globs:
        if pattern.startswith("/") or ".." in pattern.split("/"):
            raise _bad(f"artifact glob {pattern!r} must stay inside the workspace")
    return tuple(globs)


def plan_exec(
    body: Mapping[str, Any], *, gradle: str = "gradle", webhook_http: bool = False
) -> ExecPlan:
    """The plan of an exec request; `BuildError` (BAD_REQUEST, UNSUPPORTED) otherwise."""
    command = body.get("command")
    webhook = parse_webhook(body.get("webhook"), allow_http=webhook_http)
    network = body.get("network", "none")
    if network != "none":
        raise _bad("network: only 'none' is available (builds run without network access)")
    env = {**BASE_ENV, **_env(body.get("env"))}
    if command == "xcodebuild":
        raise BuildError(
            BuildReason.UNSUPPORTED,
            "xcodebuild needs a macOS host (the xcode driver); this is a Linux Gradle instance",
        )
    if command == "gradlebuild":
        tasks = _strings(body.get("tasks"), "tasks") or ["build"]
        for task in tasks:
            if not _TASK.fullmatch(task) or task.startswith("-"):
                raise _bad(f"bad task name {task!r} (options go in 'args')")
        args = _strings(body.get("args"), "args")
        argv = (gradle, "--no-daemon", "--console=plain", "--build-cache", *tasks, *args)
        return ExecPlan(
            kind="gradlebuild",
            argv=argv,
            display="gradle " + " ".join(argv[1:]),
            cwd=_inside(body.get("projectPath"), "projectPath"),
            env=env,
            timeout_s=_timeout(body),
            artifacts=_artifacts(body, DEFAULT_ARTIFACTS),
            webhook=webhook,
            upload=_upload(body.get("upload")),
        )
    if command == "run":
        line = body.get("commandLine")
        if not isinstance(line, str) or not line.strip() or len(line) > _MAX_STRING:
            raise _bad("run: 'commandLine' must be a non-empty string")
        if "\x00" in line:
            raise _bad("run: 'commandLine' holds a NUL")
        return ExecPlan(
            kind="run",
            argv=("/bin/sh", "-c", line),
            display=line,
            cwd=_inside(body.get("cwd"), "cwd"),
            env=env,
            timeout_s=_timeout(body),
            artifacts=_artifacts(body, ()),
            webhook=webhook,
            upload=_upload(body.get("upload")),
        )
    raise _bad("command must be 'gradlebuild', 'run' or 'xcodebuild'")
