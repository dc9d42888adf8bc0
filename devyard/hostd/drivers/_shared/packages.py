"""Read an app's id, label and version from the file handed to ``install``.

Android (.apk, a zip), in this order:

1. ``devyard-package.txt`` at the zip's root, the test form: a bare line is the package
   name; ``package=``, ``label=`` and ``version=`` lines set fields explicitly.
2. ``AndroidManifest.xml``: the binary XML of a real APK (its string pool and the
   ``<manifest package versionName>`` and ``<application label>`` attributes are read), or a
   plain-text manifest with ``package="..."``.
3. The file name: ``com.example.app.apk`` -> ``com.example.app``; a name that is no valid
   package name is lower-cased and sanitized, and a single segment gets ``sideload.`` in front.

A file that is not a zip is refused, as ``pm install`` refuses it (INSTALL_PARSE_FAILED_NOT_APK).

Split APKs (`read_splits`, ``pm install-multiple`` semantics): the ``split`` attribute of
``<manifest>`` (``split=`` in the test form) names a split; the set must hold exactly one base
APK (no ``split``), every file the same package and the same ``versionCode`` (when given), and
no split name twice. The app is the base's.

iOS (.ipa, a zip with ``Payload/<name>.app/Info.plist``; or an ``.app`` directory):
``CFBundleIdentifier``, ``CFBundleDisplayName`` or ``CFBundleName``, and
``CFBundleShortVersionString`` from Info.plist (XML or binary, via plistlib), else the name.

Sync and blocking (zip and plist I/O): call through `trio.to_thread.run_sync`.
"""

from __future__ import annotations

import plistlib
import re
import struct
import zipfile
from pathlib import Path
from typing import Final

import attrs

from .._errors import InstallError
from ..base import Platform

__all__ = ["PackageInfo", "SplitSet", "read_package", "read_splits"]

_PACKAGE_RE: Final = re.compile(r"[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z][A-Za-z0-9_]*)+")
_MAX_TEXT: Final = 1 << 20  # manifest and plist files bigger than this are not ours to parse


@attrs.frozen
class PackageInfo:
    app_id: str
    label: str
    version: str = ""


@attrs.frozen
class SplitSet:
    """A validated set of split APKs: the app (the base's package) and the base file."""

    app: PackageInfo
    base: Path
    splits: tuple[str, ...]  # the split names, in the order given


def read_splits(paths: list[Path]) -> SplitSet:
    """Check *paths* as one app's split APKs (see the module docstring); `InstallError` with
    ``pm``'s failure names if they are not."""
    if not paths:
        raise InstallError("INSTALL_FAILED_INVALID_APK: no APK given")
    base: tuple[Path, dict[str, str]] | None = None
    names: list[str] = []
    package = version_code = None
    for path in paths:
        fields = _apk_fields(path)
        app_id = fields.get("package") or ""
        if package is None:
            package = app_id
        elif app_id != package:
            raise InstallError(
                f"INSTALL_FAILED_INVALID_APK: split {path.name} has package {app_id!r},"
                f" the others {package!r}"
            )
        code = fields.get("versionCode")
        if code is not None:
            if version_code is not None and code != version_code:
                raise InstallError(
                    f"INSTALL_FAILED_INVALID_APK: split {path.name} has versionCode {code},"
                    f" the others {version_code}"
                )
            version_code = code
        split = fields.get("split")
        if split is None:
            if base is not None:
                raise InstallError(
                    f"INSTALL_FAILED_INVALID_APK: two base APKs ({base[0].name}, {path.name})"
                )
            base = (path, fields)
        elif split in names:
            raise InstallError(f"INSTALL_FAILED_INVALID_APK: split {split!r} given twice")
        else:
            names.append(split)
    if base is None:
        raise InstallError("INSTALL_FAILED_INVALID_APK: missing the base APK (one without split)")
    return SplitSet(app=_read_apk(base[0]), base=base[0], splits=tuple(names))


def _apk_fields(path: Path) -> dict[str, str]:
    if not path.is_file() or not zipfile.is_zipfile(path):
        raise InstallError(f"INSTALL_PARSE_FAILED_NOT_APK: {path.name} is not an APK (zip)")
    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
            if "devyard-package.txt" in names:
                return _read_package_txt(archive.read("devyard-package.txt")[:_MAX_TEXT])
            if "AndroidManifest.xml" in names:
                return _read_manifest(archive.read("AndroidManifest.xml")[:_MAX_TEXT])
    except (zipfile.BadZipFile, OSError) as exc:
        raise InstallError(f"INSTALL_PARSE_FAILED_NOT_APK: {path.name}: {exc}") from exc
    raise InstallError(f"INSTALL_PARSE_FAILED_MANIFEST_MALFORMED: {path.name} has no manifest")


def read_package(platform: Platform, path: Path) -> PackageInfo:
    """What ``path`` would install as on ``platform``; `InstallError` if it cannot."""
    if platform is Platform.ANDROID:
        return _read_apk(path)
    if platform is Platform.IOS:
        return _read_ios(path)
    raise InstallError(f"{platform} instances do not install apps")


def label_from_id(app_id: str) -> str:
    last = app_id.rsplit(".", 1)[-1].replace("_", " ").strip()
    return last[:1].upper() + last[1:] if last else app_id


def _from_name(stem: str) -> str:
    if _PACKAGE_RE.fullmatch(stem):
        return stem
    cleaned = re.sub(r"[^a-z0-9_.]+", "_", stem.lower())
    parts = [p if p[:1].isalpha() else f"a{p}" for p in cleaned.split(".") if p.strip("_")]
    if not parts:
        parts = ["app"]
    if len(parts) == 1:
        parts.insert(0, "sideload")
    return ".".join(parts)


def _read_apk(path: Path) -> PackageInfo:
    if not path.is_file():
        raise InstallError(f"{path.name}: no such file")
    if not zipfile.is_zipfile(path):
        raise InstallError(f"INSTALL_PARSE_FAILED_NOT_APK: {path.name} is not an APK (zip)")
    fields: dict[str, str] = {}
    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
            if "devyard-package.txt" in names:
                fields = _read_package_txt(archive.read("devyard-package.txt")[:_MAX_TEXT])
            elif "AndroidManifest.xml" in names:
                fields = _read_manifest(archive.read("AndroidManifest.xml")[:_MAX_TEXT])
    except (zipfile.BadZipFile, OSError) as exc:
        raise InstallError(f"INSTALL_PARSE_FAILED_NOT_APK: {path.name}: {exc}") from exc
    app_id = fields.get("package") or _from_name(path.stem)
    if not _PACKAGE_RE.fullmatch(app_id):
        raise InstallError(f"INSTALL_PARSE_FAILED_BAD_PACKAGE_NAME: {app_id!r}")
    label = fields.get("label") or label_from_id(app_id)
    return PackageInfo(app_id, label, fields.get("version", ""))


def _read_package_txt(data: bytes) -> dict[str, str]:
    fields: dict[str, str] = {}
    for raw in data.decode("utf-8", "replace").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if sep:
            fields[key.strip()] = value.strip()
        else:
            fields.setdefault("package", line)
    return fields


def _read_manifest(data: bytes) -> dict[str, str]:
    if data[:2] == b"\x03\x00":
        return _read_binary_manifest(data)
    text = data.decode("utf-8", "replace")
    fields: dict[str, str] = {}
    for key, pattern in (
        ("package", r'\bpackage\s*=\s*"([^"]+)"'),
        ("version", r'\bandroid:versionName\s*=\s*"([^"]+)"'),
        ("versionCode", r'\bandroid:versionCode\s*=\s*"([^"]+)"'),
        ("split", r'<manifest\b[^>]*\bsplit\s*=\s*"([^"]+)"'),
        ("label", r'<application\b[^>]*\bandroid:label\s*=\s*"([^"@][^"]*)"'),
    ):
        match = re.search(pattern, text)
        if match:
            fields[key] = match.group(1)
    return fields


# Android binary XML ("AXML", frameworks/base/libs/androidfw/ResourceTypes.h).
_RES_STRING_POOL: Final = 0x0001
_RES_XML_START_ELEMENT: Final = 0x0102
_UTF8_FLAG: Final = 0x100
_TYPE_STRING: Final = 0x03
_NO_INDEX: Final = 0xFFFFFFFF


def _read_binary_manifest(data: bytes) -> dict[str, str]:
    """The package, versionName and (string) application label of a binary manifest."""
    fields: dict[str, str] = {}
    strings: list[str] = []
    try:
        _type, header_size, _size = struct.unpack_from("<HHI", data, 0)
        offset = header_size
        while offset + 8 <= len(data):
            chunk_type, chunk_header, chunk_size = struct.unpack_from("<HHI", data, offset)
            if chunk_size < 8:
                break
            if chunk_type == _RES_STRING_POOL:
                strings = _string_pool(data, offset)
            elif chunk_type == _RES_XML_START_ELEMENT:
                _element(data, offset, chunk_header, strings, fields)
            offset += chunk_size
    except (struct.error, IndexError, UnicodeDecodeError):
        pass  # a damaged manifest: keep what was read, the file name fills the rest
    return fields


def _string_pool(data: bytes, start: int) -> list[str]:
    _t, header_size, _s, count, _styles, flags, strings_start, _ = struct.unpack_from(
        "<HHIIIIII", data, start
    )
    offsets = struct.unpack_from(f"<{count}I", data, start + header_size)
    base = start + strings_start
    utf8 = bool(flags & _UTF8_FLAG)
    return [_pool_string(data, base + off, utf8) for off in offsets]


def _pool_string(data: bytes, at: int, utf8: bool) -> str:
    if utf8:
        at += 2 if data[at] & 0x80 else 1  # length in UTF-16 units: skipped
        length = data[at]
        if length & 0x80:
            length = ((length & 0x7F) << 8) | data[at + 1]
            at += 1
        return data[at + 1 : at + 1 + length].decode("utf-8")
    (length,) = struct.unpack_from("<H", data, at)
    at += 2
    if length & 0x8000:
        (low,) = struct.unpack_from("<H", data, at)
        length = ((length & 0x7FFF) << 16) | low
        at += 2
    return data[at : at + 2 * length].decode("utf-16-le")


def _element(
    data: bytes, start: int, header_size: int, strings: list[str], fields: dict[str, str]
) -> None:
    ext = start + header_size
    _ns, name_index, attr_start, attr_size, attr_count = struct.unpack_from("<IIHHH", data, ext)
    element = strings[name_index] if name_index < len(strings) else ""
    wanted = {
        "manifest": {"package": "package", "versionName": "version", "split": "split"},
        "application": {"label": "label"},
    }.get(element)
    if not wanted:
        return
    for i in range(attr_count):
        at = ext + attr_start + i * attr_size
        _ans, attr_name, raw, _vsize, _res0, value_type, value = struct.unpack_from(
            "<IIIHBBI", data, at
        )
        key = wanted.get(strings[attr_name] if attr_name < len(strings) else "")
        index = raw if raw != _NO_INDEX else (value if value_type == _TYPE_STRING else _NO_INDEX)
        if key and index < len(strings):
            fields.setdefault(key, strings[index])


def _read_ios(path: Path) -> PackageInfo:
    info: dict[str, object] = {}
    try:
        if path.is_dir():
            plist = path / "Info.plist"
            if plist.is_file():
                info = _parse_plist(plist.read_bytes()[:_MAX_TEXT])
        elif zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                found = [
                    n for n in archive.namelist()
                    if re.fullmatch(r"Payload/[^/]+\.app/Info\.plist", n)
                ]  # fmt: skip
                if found:
                    info = _parse_plist(archive.read(found[0])[:_MAX_TEXT])
        elif path.exists():
            raise InstallError(f"{path.name} is neither an .ipa (zip) nor an .app directory")
        else:
            raise InstallError(f"{path.name}: no such file or directory")
    except (zipfile.BadZipFile, OSError) as exc:
        raise InstallError(f"{path.name}: {exc}") from exc
    app_id = _text(info.get("CFBundleIdentifier")) or _from_name(path.stem)
    label = (
        _text(info.get("CFBundleDisplayName"))
        or _text(info.get("CFBundleName"))
        or (path.stem if not _PACKAGE_RE.fullmatch(path.stem) else label_from_id(app_id))
    )
    return PackageInfo(app_id, label, _text(info.get("CFBundleShortVersionString")))


def _parse_plist(data: bytes) -> dict[str, object]:
    try:
        loaded = plistlib.loads(data)
    except (plistlib.InvalidFileException, ValueError, OverflowError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _text(value: object) -> str:
    return value.strip() if isinstance(value, str) else ""
