"""``POST {apiUrl}/exec {command: "xcodebuild", ...}`` as the SDK sends it (``@limrun/api``'s
``xcode-instances-helpers.ts``), checked, as an `ExecPlan` (docs/xcode.md).

    {command: "xcodebuild",
     xcodebuild?: {workspace?, project?, scheme?, sdk?, configuration?},
     xcodegen?: {spec?, project?, projectRoot?},
     signing?: {certificateP12Base64?, certificatePassword?, provisioningProfileBase64?},
     buildSettings?: {NAME: value}, env?, timeoutSeconds?, artifacts?}

The command line is ``/bin/sh -c`` over positional arguments (nothing of the body is ever
pasted into a script): ``xcodegen generate`` first when ``xcodegen`` is given, then
``xcodebuild ... -derivedDataPath build/DerivedData build``, then each built ``.app`` packed
as ``build/Artifacts/<name>.app.tar.gz`` (the default artifacts: what the commercial service
uploads). Signing material is a secret: written to a directory of its own outside the
workspace (0700, files 0600; artifacts never see it), named to the build by
``DEVYARD_SIGNING_*`` variables (paths, never the values), its values redacted from the
output by the keeper's ``redact`` mode, and removed when the exec ends (`Secrets`).
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import secrets as random
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import attrs

from ...builds.commands import ExecPlan
from ...builds.errors import BuildError, BuildReason
from ...builds.paths import check_path
from ...builds.sandbox import KEEPER, WORKSPACE

__all__ = ["DERIVED_DATA", "KEYCHAIN", "SDKS", "Secrets", "XcodeTools", "plan_xcodebuild"]

SDKS: Final = ("iphonesimulator", "iphoneos", "watchsimulator", "watchos")
DERIVED_DATA: Final = "build/DerivedData"
ARTIFACTS: Final = ("build/Artifacts/*.tar.gz",)
#: The temporary keychain's file name in the exec's secrets directory.
KEYCHAIN: Final = "build.keychain-db"
_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9 _.\-]{0,127}")
_SETTING: Final = re.compile(r"[A-Z_][A-Z0-9_]{0,127}")
_ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MAX_SECRET: Final = 1024 * 1024
_SCRIPT: Final = """set -e
if [ -n "$DEVYARD_XCODEGEN" ]; then
  "$DEVYARD_XCODEGEN" generate --spec "$1" --project "$2" --project-root "$3"
fi
shift 3
if [ -n "$DEVYARD_SECURITY" ] && [ -n "$DEVYARD_SIGNING_CERTIFICATE" ]; then
  kc="$DEVYARD_KEYCHAIN"
  kcpass="$(cat "$DEVYARD_KEYCHAIN_PASSWORD_FILE")"
  certpass=""
  if [ -n "$DEVYARD_SIGNING_PASSWORD_FILE" ]; then
    certpass="$(cat "$DEVYARD_SIGNING_PASSWORD_FILE")"
  fi
  trap '"$DEVYARD_SECURITY" delete-keychain "$kc" || true' EXIT
  "$DEVYARD_SECURITY" create-keychain -p "$kcpass" "$kc"
  "$DEVYARD_SECURITY" set-keychain-settings -lut 21600 "$kc"
  "$DEVYARD_SECURITY" unlock-keychain -p "$kcpass" "$kc"
  "$DEVYARD_SECURITY" import "$DEVYARD_SIGNING_CERTIFICATE" -k "$kc" -P "$certpass" \\
    -T /usr/bin/codesign -T /usr/bin/security
  "$DEVYARD_SECURITY" set-key-partition-list -S apple-tool:,apple:,codesign: -s \\
    -k "$kcpass" "$kc"
  set -- "$@" "OTHER_CODE_SIGN_FLAGS=--keychain $kc"
fi
"$@"
mkdir -p build/Artifacts
for app in build/DerivedData/Build/Products/*/*.app; do
  [ -d "$app" ] || continue
  tar -czf "build/Artifacts/$(basename "$app").tar.gz" -C "$(dirname "$app")" "$(basename "$app")"
done
"""


def _bad(message: str) -> BuildError:
    return BuildError(BuildReason.BAD_REQUEST, message)


@attrs.frozen
class XcodeTools:
    """Where the tools are on this host (found once by the driver: PATH or configuration)."""

    xcodebuild: str
    xcodegen: str | None
    python: str = sys.executable  # runs the keeper's redact mode
    security: str | None = None  # the temporary keychain of a signed build (macOS)
    sandbox_exec: str | None = None  # the build's Seatbelt sandbox (macOS; seatbelt.py)


class Secrets:
    """The signing directories of an instance's execs, under *root* (outside the workspace)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.dirs: list[Path] = []  # the running exec's (one exec at a time)

    def write(self, signing: Mapping[str, Any]) -> tuple[dict[str, str], list[str]]:
        """Write *signing*'s material; (the build's ``DEVYARD_SIGNING_*`` variables, the
        strings to redact). Blocking."""
        files = {
            "certificateP12Base64": "certificate.p12",
            "provisioningProfileBase64": "profile.mobileprovision",
        }
        unknown = set(signing) - {*files, "certificatePassword"}
        if unknown:
            raise _bad(f"signing: unknown fields {sorted(unknown)}")
        redact: list[str] = []
        decoded: dict[str, bytes] = {}
        for field, name in files.items():
            value = signing.get(field)
            if value is None:
                continue
            if not isinstance(value, str) or len(value) > _MAX_SECRET:
                raise _bad(f"signing.{field} must be base64 text of at most {_MAX_SECRET} bytes")
            try:
                decoded[name] = base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                raise _bad(f"signing.{field} is not base64") from None
            redact.append(value)
        password = signing.get("certificatePassword")
        if password is not None and (not isinstance(password, str) or "\x00" in password):
            raise _bad("signing.certificatePassword must be a string")
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        where = self.root / random.token_hex(8)
        where.mkdir(mode=0o700)
        env: dict[str, str] = {}
        for name, data in decoded.items():
            _write_secret(where / name, data)
        if "certificate.p12" in decoded:
            env["DEVYARD_SIGNING_CERTIFICATE"] = str(where / "certificate.p12")
        if "profile.mobileprovision" in decoded:
            env["DEVYARD_SIGNING_PROFILE"] = str(where / "profile.mobileprovision")
        if password:
            _write_secret(where / "certificate-password", password.encode())
            env["DEVYARD_SIGNING_PASSWORD_FILE"] = str(where / "certificate-password")
            redact.append(password)
        if "certificate.p12" in decoded:  # a keychain of its own, deleted after the build
            keychain_password = random.token_urlsafe(24)
            _write_secret(where / "keychain-password", keychain_password.encode())
            env["DEVYARD_KEYCHAIN"] = str(where / KEYCHAIN)
            env["DEVYARD_KEYCHAIN_PASSWORD_FILE"] = str(where / "keychain-password")
            redact.append(keychain_password)
        self.dirs.append(where)
        _write_secret(where / "redact", "\n".join(redact).encode())
        env["DEVYARD_SIGNING_REDACT"] = str(where / "redact")
        return env, redact

    def take(self) -> list[Path]:
        """The ended exec's directories (it is no longer theirs to keep)."""
        dirs, self.dirs = self.dirs, []
        return dirs

    def clear(self) -> None:
        """Remove every exec's signing material (blocking; with the instance)."""
        self.dirs = []
        shutil.rmtree(self.root, ignore_errors=True)


def _write_secret(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _relative(value: object, what: str) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise _bad(f"{what} must be a path relative to the workspace")
    return check_path(value.strip("/"))


def _xcodebuild_args(settings: Mapping[str, Any], workspace: Path) -> list[str]:
    unknown = set(settings) - {"workspace", "project", "scheme", "sdk", "configuration"}
    if unknown:
        raise _bad(f"xcodebuild: unknown fields {sorted(unknown)}")
    args: list[str] = []
    project_file = _relative(settings.get("workspace"), "xcodebuild.workspace")
    if project_file is not None:
        args += ["-workspace", str(workspace / project_file)]
    elif (project := _relative(settings.get("project"), "xcodebuild.project")) is not None:
        args += ["-project", str(workspace / project)]
    for field, flag in (("scheme", "-scheme"), ("configuration", "-configuration")):
        value = settings.get(field)
        if value is None:
            continue
        if not isinstance(value, str) or not _NAME.fullmatch(value):
            raise _bad(f"xcodebuild.{field} {value!r}: letters, digits, ' ', '_', '.', '-'")
        args += [flag, value]
    sdk = settings.get("sdk")
    if sdk is not None:
        if sdk not in SDKS:
            raise _bad(f"xcodebuild.sdk must be one of {', '.join(SDKS)}")
        args += ["-sdk", str(sdk)]
    return args


def _build_settings(value: object) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, dict) or len(value) > 256:
        raise _bad("buildSettings must be an object of at most 256 NAME: value pairs")
    out = []
    for name, text in value.items():
        if not isinstance(name, str) or not _SETTING.fullmatch(name):
            raise _bad(f"buildSettings: bad setting name {name!r} (upper case, digits, '_')")
        if not isinstance(text, str) or any(c in text for c in "\x00\n\r"):
            raise _bad(f"buildSettings.{name} must be a one-line string")
        out.append(f"{name}={text}")
    return out


def _xcodegen(value: object, tools: XcodeTools) -> list[str]:
    if value is None:
        return ["", "", ""]
    if not isinstance(value, dict) or set(value) - {"spec", "project", "projectRoot"}:
        raise _bad("xcodegen is an object with spec?, project?, projectRoot?")
    if tools.xcodegen is None:
        raise BuildError(BuildReason.UNSUPPORTED, "this host has no xcodegen")
    spec = _relative(value.get("spec"), "xcodegen.spec") or "project.yml"
    here = spec.rpartition("/")[0] or "."
    project = _relative(value.get("project"), "xcodegen.project") or here
    root = _relative(value.get("projectRoot"), "xcodegen.projectRoot") or here
    return [spec, project, root]


def plan_xcodebuild(
    body: Mapping[str, Any],
    *,
    tools: XcodeTools,
    workspace: Path,
    home: Path,
    secrets: Secrets,
    base: ExecPlan,
) -> ExecPlan:
    """The plan of an ``xcodebuild`` exec. *base*: what `plan_exec` made of the same body as
    a ``run`` (its env, timeout and artifacts, checked). *workspace*/*home*: real paths (the
    xcode driver runs without bubblewrap). `BuildError` on a bad body."""
    settings = body.get("xcodebuild") or {}
    if not isinstance(settings, dict):
        raise _bad("xcodebuild must be an object")
    args = _xcodebuild_args(settings, workspace)
    args += ["-derivedDataPath", str(workspace / DERIVED_DATA)]
    args += [*_build_settings(body.get("buildSettings")), "build"]
    positional = _xcodegen(body.get("xcodegen"), tools)
    env = {k: v for k, v in base.env.items() if _ENV_NAME.fullmatch(k)}
    tool_dir = os.path.dirname(tools.xcodebuild)
    env.update(
        PATH=f"{tool_dir}:/usr/bin:/bin:/usr/sbin:/sbin",
        HOME=str(home),
        TMPDIR=str(home / "tmp"),
        DEVYARD_XCODEGEN=(tools.xcodegen or "") if body.get("xcodegen") is not None else "",
    )
    env.pop("GRADLE_USER_HOME", None)
    argv: list[str] = ["/bin/sh", "-c", _SCRIPT, "xcodebuild", *positional, tools.xcodebuild]
    argv += args
    signing = body.get("signing")
    if signing is not None:
        if not isinstance(signing, dict):
            raise _bad("signing must be an object")
        signing_env, _ = secrets.write(signing)
        redact = signing_env.pop("DEVYARD_SIGNING_REDACT")
        env.update(signing_env)
        env["DEVYARD_SECURITY"] = tools.security or ""
        argv = [tools.python, "-I", str(KEEPER), "redact", f"--secrets={redact}", "--", *argv]
    display = "xcodebuild " + " ".join(args)
    artifacts = base.artifacts if "artifacts" in body else ARTIFACTS
    return attrs.evolve(
        base,
        kind="xcodebuild",
        argv=tuple(argv),
        display=display,
        cwd=WORKSPACE,
        env=env,
        artifacts=artifacts,
    )
