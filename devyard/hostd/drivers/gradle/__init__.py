"""The ``gradle`` driver: a Linux build machine that syncs sources and runs Gradle in a
sandbox (`devyard.hostd.builds`); see `device.GradleDevice` and docs/builds.md."""

from .device import DRIVER_NAME, GradleConfig, GradleDevice, open_gradle_device

__all__ = ["DRIVER_NAME", "GradleConfig", "GradleDevice", "open_gradle_device"]
