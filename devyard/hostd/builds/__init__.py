"""The data plane of build instances: source sync, sandboxed execs, their events and logs.

`host.BuildHost` is one instance's (its workspace and execs); `http.serve_build_api` serves
its ``/sync`` and ``/exec`` routes on the instance's ``apiUrl``; `sandbox` builds the
bubblewrap command line. docs/builds.md is the user's reference.
"""

from .host import BuildConfig, BuildHost
from .http import is_build_path, serve_build_api
from .sandbox import SandboxConfig, SandboxLimits

__all__ = [
    "BuildConfig",
    "BuildHost",
    "SandboxConfig",
    "SandboxLimits",
    "is_build_path",
    "serve_build_api",
]
