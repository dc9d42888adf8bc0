"""A minimal Android binary XML (AXML) writer, to test reading real APK manifests.

Follows frameworks/base/libs/androidfw/include/androidfw/ResourceTypes.h: a RES_XML_TYPE
header, a string pool (UTF-16 as aapt writes it, or UTF-8 as aapt2 does), a namespace and
START/END_ELEMENT chunks whose attributes carry a raw string index and a typed value.
"""

from __future__ import annotations

import struct

ANDROID_NS = "http://schemas.android.com/apk/res/android"
NO_INDEX = 0xFFFFFFFF
TYPE_STRING = 0x03
TYPE_REFERENCE = 0x01


def _pool(strings: list[str], utf8: bool) -> bytes:
    body = b""
    offsets = []
    for text in strings:
        offsets.append(len(body))
        if utf8:
            raw = text.encode()
            body += bytes([len(text), len(raw)]) + raw + b"\x00"
        else:
            body += struct.pack("<H", len(text)) + text.encode("utf-16-le") + b"\x00\x00"
    body += b"\x00" * (-len(body) % 4)
    header_size = 28
    strings_start = header_size + 4 * len(strings)
    size = strings_start + len(body)
    flags = 0x100 if utf8 else 0
    header = struct.pack(
        "<HHIIIIII", 0x0001, header_size, size, len(strings), 0, flags, strings_start, 0
    )
    return header + struct.pack(f"<{len(strings)}I", *offsets) + body


def manifest(
    package: str, version: str, label: str | None, *, utf8: bool = False, label_ref: bool = False
) -> bytes:
    """<manifest package versionName><application label/></manifest> in binary form."""
    strings = ["android", ANDROID_NS, "manifest", "package", "versionName", "application",
               "label", package, version, label or ""]  # fmt: skip
    index = {s: i for i, s in enumerate(strings)}
    ns = index[ANDROID_NS]

    def attribute(namespace: int, name: str, value: str, *, raw: bool = True) -> bytes:
        raw_index = index[value] if raw else NO_INDEX
        return struct.pack(
            "<IIIHBBI", namespace, index[name], raw_index, 8, 0, TYPE_STRING, index[value]
        )

    def start(name: str, attributes: list[bytes]) -> bytes:
        ext = struct.pack("<IIHHHHHH", NO_INDEX, index[name], 20, 20, len(attributes), 0, 0, 0)
        body = ext + b"".join(attributes)
        return struct.pack("<HHIII", 0x0102, 16, 16 + len(body), 1, NO_INDEX) + body

    def end(name: str) -> bytes:
        return struct.pack("<HHIIIII", 0x0103, 16, 24, 1, NO_INDEX, NO_INDEX, index[name])

    namespace = struct.pack("<HHIIIII", 0x0100, 16, 24, 1, NO_INDEX, index["android"], ns)
    app_attributes = []
    if label is not None:
        if label_ref:  # android:label="@string/app_name": a reference, not a string
            reference = 0x7F0B0001
            app_attributes.append(
                struct.pack(
                    "<IIIHBBI", ns, index["label"], NO_INDEX, 8, 0, TYPE_REFERENCE, reference
                )
            )
        else:
            app_attributes.append(attribute(ns, "label", label, raw=False))
    chunks = (
        _pool(strings, utf8)
        + namespace
        + start("manifest", [attribute(NO_INDEX, "package", package),
                             attribute(ns, "versionName", version)])
        + start("application", app_attributes)
        + end("application")
        + end("manifest")
    )  # fmt: skip
    return struct.pack("<HHI", 0x0003, 8, 8 + len(chunks)) + chunks
