"""``spec.sandbox`` and the Chrome flag entries of ``spec.initialAssets`` (spec 2.1), checked at
create time. Pure: the API turns a `SandboxSpecError` into a 422 naming the field.

Only ``sandbox.playwrightAndroid`` exists (docs/sandbox.md); the schema refuses anything else
(``sandbox.xcode`` too, until Xcode sandboxes exist). It and the Chrome flags are Android's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...core.chrome_flags import ChromeFlagError, chrome_flags

__all__ = ["SandboxSpecError", "check_sandbox_spec", "playwright_android_enabled"]


class SandboxSpecError(ValueError):
    """A sandbox field this platform or this host cannot honour."""


def playwright_android_enabled(spec: Mapping[str, Any]) -> bool:
    sandbox = spec.get("sandbox") or {}
    return bool((sandbox.get("playwrightAndroid") or {}).get("enabled", False))


def check_sandbox_spec(platform: str, spec: Mapping[str, Any]) -> None:
    """`SandboxSpecError` when *spec* asks a sandbox or Chrome flags *platform* has not, or
    names a flag the sandbox refuses."""
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
