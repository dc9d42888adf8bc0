"""``spec.sandbox`` and the Chrome flag entries of ``spec.initialAssets`` (spec 2.1), checked at
create time. Pure: the API turns a `SandboxSpecError` into a 422 naming the field.

``sandbox.playwrightAndroid`` (docs/sandbox.md) and the Chrome flags are Android's;
``sandbox.xcode`` (an Xcode build sandbox attached to the simulator, docs/xcode.md) is iOS's;
``buildNetwork`` (the builds' allowlist) is for instances that build: gradle, xcode, and iOS
with an Xcode sandbox. A malformed allowlist is a 400 (`check_build_network`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...core.build_network import allowlist_of
from ...core.chrome_flags import ChromeFlagError, chrome_flags

__all__ = [
    "SandboxSpecError",
    "check_build_network",
    "check_sandbox_spec",
    "playwright_android_enabled",
    "xcode_sandbox_enabled",
]


class SandboxSpecError(ValueError):
    """A sandbox field this platform or this host cannot honour."""


def playwright_android_enabled(spec: Mapping[str, Any]) -> bool:
    sandbox = spec.get("sandbox") or {}
    return bool((sandbox.get("playwrightAndroid") or {}).get("enabled", False))


def xcode_sandbox_enabled(spec: Mapping[str, Any]) -> bool:
    sandbox = spec.get("sandbox") or {}
    return bool((sandbox.get("xcode") or {}).get("enabled", False))


def check_build_network(spec: Mapping[str, Any]) -> None:
    """`BuildNetworkError` (a 400) when ``spec.buildNetwork`` is malformed."""
    allowlist_of(spec)


def check_sandbox_spec(platform: str, spec: Mapping[str, Any]) -> None:
    """`SandboxSpecError` when *spec* asks a sandbox or Chrome flags *platform* has not, or
    names a flag the sandbox refuses."""
    if xcode_sandbox_enabled(spec) and platform != "ios":
        raise SandboxSpecError("spec.sandbox.xcode is for ios instances")
    builds = platform in ("gradle", "xcode") or xcode_sandbox_enabled(spec)
    if spec.get("buildNetwork") is not None and not builds:
        raise SandboxSpecError(
            "spec.buildNetwork is for instances that build: gradle, xcode, and ios with "
            "spec.sandbox.xcode.enabled"
        )
    entries = list(spec.get("initialAssets") or [])
    configurations = [e for e in entries if e.get("kind") == "Configuration"]
    if platform != "android":
        if playwright_android_enabled(spec):
            raise SandboxSpecError("spec.sandbox.playwrightAndroid is for android instances")
        if configurations:
            raise SandboxSpecError("spec.initialAssets: Configuration entries are for android")
        return
    try:
        chrome_flags(configurations)
    except ChromeFlagError as exc:
        raise SandboxSpecError(f"spec.initialAssets: {exc.message}") from exc
