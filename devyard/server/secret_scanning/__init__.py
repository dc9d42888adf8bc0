"""Leaked-token reports from a code host's secret scanning (spec 4.3, 6; docs/security.md).

`signatures` proves a report comes from the code host (ECDSA P-256 over the raw body, keys
from a configurable endpoint); `reports` parses the body; `revoke` finds each reported
credential, revokes it and tells its organization. The HTTP route is
``api/routes/secret_scanning.py``.
"""

from __future__ import annotations

from .reports import Report, ReportError, parse_reports
from .revoke import AUDIT_KIND, Finding, Label, LeakResponder
from .signatures import (
    KEY_ID_HEADER,
    SIGNATURE_HEADER,
    KeyRing,
    SignatureError,
    SignatureReason,
    load_public_keys,
    verify_signature,
)

__all__ = [
    "AUDIT_KIND",
    "KEY_ID_HEADER",
    "SIGNATURE_HEADER",
    "Finding",
    "KeyRing",
    "Label",
    "LeakResponder",
    "Report",
    "ReportError",
    "SignatureError",
    "SignatureReason",
    "load_public_keys",
    "parse_reports",
    "verify_signature",
]
