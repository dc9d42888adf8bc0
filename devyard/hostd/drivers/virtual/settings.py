"""Android's ``settings`` (system / secure / global), as ``settings get/put/delete/list`` see them.

A plain, validated mapping per namespace, seeded with the values a fresh device reports; the
device persists it in the sandbox's state file after each change.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Final

from .._errors import InvalidInputError
from .models import ModelProfile

__all__ = ["NAMESPACES", "AndroidSettings"]

NAMESPACES: Final = ("system", "secure", "global")
_KEY_RE: Final = re.compile(r"[A-Za-z0-9_.:-]+")


def _defaults(model: ModelProfile, serial: str) -> dict[str, dict[str, str]]:
    android_id = hashlib.sha256(serial.encode()).hexdigest()[:16]
    return {
        "system": {
            "accelerometer_rotation": "0",
            "font_scale": "1.0",
            "screen_brightness": "128",
            "screen_off_timeout": "600000",
            "user_rotation": "0",
        },
        "secure": {
            "android_id": android_id,
            "default_input_method": "com.android.inputmethod.latin/.LatinIME",
            "location_mode": "0",
        },
        "global": {
            "adb_enabled": "1",
            "airplane_mode_on": "0",
            "animator_duration_scale": "1.0",
            "development_settings_enabled": "1",
            "device_name": model.model_name,
            "stay_on_while_plugged_in": "0",
            "transition_animation_scale": "1.0",
            "window_animation_scale": "1.0",
        },
    }


class AndroidSettings:
    def __init__(self, model: ModelProfile, serial: str) -> None:
        self._values = _defaults(model, serial)

    def load(self, saved: dict[str, Any]) -> None:
        for namespace, values in saved.items():
            if namespace in self._values and isinstance(values, dict):
                self._values[namespace] = {str(k): str(v) for k, v in values.items()}

    def dump(self) -> dict[str, dict[str, str]]:
        return {namespace: dict(values) for namespace, values in self._values.items()}

    def get(self, namespace: str, key: str) -> str | None:
        return self._namespace(namespace, key).get(key)

    def put(self, namespace: str, key: str, value: str) -> None:
        self._namespace(namespace, key)[key] = value

    def delete(self, namespace: str, key: str) -> bool:
        return self._namespace(namespace, key).pop(key, None) is not None

    def list(self, namespace: str) -> dict[str, str]:
        return dict(sorted(self._namespace(namespace, None).items()))

    def _namespace(self, namespace: str, key: str | None) -> dict[str, str]:
        if namespace not in NAMESPACES:
            names = ", ".join(NAMESPACES)
            raise InvalidInputError(f"unknown settings namespace {namespace!r} (one of {names})")
        if key is not None and not _KEY_RE.fullmatch(key):
            raise InvalidInputError(f"bad settings key {key!r}")
        return self._values[namespace]
