"""AdbConfig refuses what would advertise nonsense in the CNXN banner."""

from __future__ import annotations

import pytest

from devyard.hostd.adb import DEFAULT_FEATURES
from devyard.hostd.adb.config import AdbConfig


def test_features_are_a_list_of_names() -> None:
    assert AdbConfig().features == DEFAULT_FEATURES
    assert AdbConfig(features=["shell_v2", "cmd"]).features == ("shell_v2", "cmd")
    with pytest.raises(TypeError, match="not one string"):
        AdbConfig(features="shell_v2")  # would be s, h, e, l, ...
    for bad in ("", "a,b", "a;b", "a:b"):
        with pytest.raises(ValueError, match="bad feature name"):
            AdbConfig(features=[bad])
