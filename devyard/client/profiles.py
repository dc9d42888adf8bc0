"""Where the CLI's server and API key come from: flags, ``DEVYARD_*`` variables, profiles.

A profile is a named server and key in ``config.toml`` under the platform's config directory
(`config_dir`: ``$DEVYARD_CONFIG_DIR``, else ``$XDG_CONFIG_HOME/devyard`` or
``~/.config/devyard``; ``~/Library/Application Support/devyard`` on macOS;
``%APPDATA%\\devyard`` on Windows)::

    default_profile = "work"

    [profiles.work]
    base_url = "https://devyard.example.com"
    api_key = "dy_..."            # the file is written 0600 by `devyard login`

Resolution, strongest first: ``--base-url`` / ``--api-key`` (or ``--api-key-file``), then
``DEVYARD_BASE_URL`` / ``DEVYARD_API_KEY``, then the profile (``--profile``, else
``DEVYARD_PROFILE``, else ``default_profile``, else ``default``), then the default URL.
Only this module and the CLI read the environment, and only through the mapping passed in.
"""

from __future__ import annotations

import json
import os
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import attrs

__all__ = [
    "DEFAULT_BASE_URL",
    "ENV_API_KEY",
    "ENV_BASE_URL",
    "ENV_CONFIG_DIR",
    "ENV_PROFILE",
    "ConfigFileError",
    "Credentials",
    "Profile",
    "config_dir",
    "read_profiles",
    "resolve",
    "save_profile",
]

ENV_BASE_URL: Final = "DEVYARD_BASE_URL"
ENV_API_KEY: Final = "DEVYARD_API_KEY"
ENV_PROFILE: Final = "DEVYARD_PROFILE"
ENV_CONFIG_DIR: Final = "DEVYARD_CONFIG_DIR"
DEFAULT_BASE_URL: Final = "http://127.0.0.1:8080"
DEFAULT_PROFILE: Final = "default"
CONFIG_FILE: Final = "config.toml"


class ConfigFileError(Exception):
    """The config file cannot be read or is not what this module writes."""


@attrs.frozen
class Profile:
    name: str
    base_url: str | None = None
    api_key: str | None = attrs.field(default=None, repr=False)


@attrs.frozen
class Credentials:
    base_url: str
    api_key: str | None = attrs.field(repr=False)
    profile: str | None  # the profile that was used, if any


def config_dir(env: Mapping[str, str], platform: str = sys.platform) -> Path:
    """The directory of ``config.toml`` on this platform."""
    if env.get(ENV_CONFIG_DIR):
        return Path(env[ENV_CONFIG_DIR])
    home = Path(env.get("HOME") or Path.home())
    if platform == "darwin":
        return home / "Library" / "Application Support" / "devyard"
    if platform == "win32" and env.get("APPDATA"):
        return Path(env["APPDATA"]) / "devyard"
    return Path(env.get("XDG_CONFIG_HOME") or home / ".config") / "devyard"


def _read(path: Path) -> dict[str, object]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigFileError(f"cannot read {path}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigFileError(f"{path}: {exc}") from exc


def read_profiles(env: Mapping[str, str]) -> tuple[str | None, dict[str, Profile]]:
    """The default profile's name and every profile of the config file (none: no file)."""
    path = config_dir(env) / CONFIG_FILE
    data = _read(path)
    default = data.get("default_profile")
    tables = data.get("profiles", {})
    if not isinstance(tables, dict) or not (default is None or isinstance(default, str)):
        raise ConfigFileError(f"{path}: expected default_profile and [profiles.NAME] tables")
    profiles: dict[str, Profile] = {}
    for name, table in tables.items():
        if not isinstance(table, dict):
            raise ConfigFileError(f"{path}: [profiles.{name}] is not a table")
        unknown = set(table) - {"base_url", "api_key"}
        if unknown:
            raise ConfigFileError(f"{path}: [profiles.{name}]: unknown key {sorted(unknown)[0]}")
        url, key = table.get("base_url"), table.get("api_key")
        profiles[name] = Profile(
            name, url if isinstance(url, str) else None, key if isinstance(key, str) else None
        )
    return default, profiles


def _toml_string(value: str) -> str:
    return json.dumps(value)  # a JSON string is a TOML basic string for these values


def save_profile(env: Mapping[str, str], profile: Profile, *, make_default: bool) -> Path:
    """Write *profile* into the config file (created 0600 in a 0700 directory)."""
    default, profiles = read_profiles(env)
    profiles[profile.name] = profile
    if make_default or default is None:
        default = profile.name
    lines = [f"default_profile = {_toml_string(default)}"]
    for name in sorted(profiles):
        entry = profiles[name]
        lines += ["", f"[profiles.{_toml_string(name)}]"]
        if entry.base_url is not None:
            lines.append(f"base_url = {_toml_string(entry.base_url)}")
        if entry.api_key is not None:
            lines.append(f"api_key = {_toml_string(entry.api_key)}")
    directory = config_dir(env)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = directory / CONFIG_FILE
    temp = directory / f".{CONFIG_FILE}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write("\n".join(lines) + "\n")
    temp.replace(path)
    return path


def resolve(
    env: Mapping[str, str],
    *,
    profile: str | None = None,
    base_url: str | None = None,
    api_key: str | None = None,
) -> Credentials:
    """The server and key to use (`ConfigFileError` for a named profile that is missing)."""
    default, profiles = read_profiles(env)
    name = profile or env.get(ENV_PROFILE) or default or DEFAULT_PROFILE
    chosen = profiles.get(name)
    if chosen is None and (profile or env.get(ENV_PROFILE)):
        known = ", ".join(sorted(profiles)) or "none"
        raise ConfigFileError(f"no profile {name!r} (profiles: {known}); add it: devyard login")
    return Credentials(
        base_url=(
            base_url
            or env.get(ENV_BASE_URL)
            or (chosen.base_url if chosen else None)
            or DEFAULT_BASE_URL
        ).rstrip("/"),
        api_key=api_key or env.get(ENV_API_KEY, "").strip() or (chosen.api_key if chosen else None),
        profile=chosen.name if chosen else None,
    )
