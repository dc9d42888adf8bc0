"""The ``android-emulator`` driver: a real Android device (an emulator it launches, or any adbd
it attaches to) driven with the real ``adb`` CLI. See `device` for the verbs, `target` for the
launch / attach seam, `config` for the environment it reads, and docs/devices.md.
"""

from .config import EmulatorConfig, Mode
from .device import DRIVER_NAME, EmulatorDevice, open_emulator_device
from .target import Target, emulator_argv, emulator_env

__all__ = [
    "DRIVER_NAME",
    "EmulatorConfig",
    "EmulatorDevice",
    "Mode",
    "Target",
    "emulator_argv",
    "emulator_env",
    "open_emulator_device",
]
