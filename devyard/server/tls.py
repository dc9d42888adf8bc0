"""TLS on the API port: a server context that a SIGHUP reloads, and ``up --tls``'s own CA.

`ServerTLS` owns the one `ssl.SSLContext` Hypercorn serves with. ``reload`` loads the
certificate files again into that same context: connections already open keep the session
they negotiated, new handshakes get the new chain, and nothing is dropped. A reload that
fails (a half-written file, a key that does not match) keeps the old chain and says why.

The settings are the modern ones only: TLS 1.2 and 1.3, forward-secret AEAD suites for 1.2
(1.3's suites are all fine), no compression, ALPN ``h2`` then ``http/1.1`` so HTTP/2 is
negotiated where the client can (RFC 9113 section 9.2).

`ensure_local_ca` makes, on first use, a private CA and a server certificate signed by it for
the names ``devyard up`` is reached by (``localhost``, the loopback addresses and the listen
host), in ``DATA_DIR/tls`` (0700; keys 0600). The CA's certificate is what a client trusts
(``--ca-file``, ``SSL_CERT_FILE``, or the system store); its key never leaves that directory.
The server certificate is made again when it nears expiry or its names change.
"""

from __future__ import annotations

import datetime
import ipaddress
import logging
import os
import ssl
from pathlib import Path
from typing import Final

import attrs
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

log = logging.getLogger(__name__)

__all__ = [
    "ALPN_PROTOCOLS",
    "LocalCertificates",
    "ServerTLS",
    "TLSFilesError",
    "ensure_local_ca",
    "server_context",
]

ALPN_PROTOCOLS: Final = ("h2", "http/1.1")
#: TLS 1.2 suites: ECDHE key exchange (forward secrecy) with AEAD ciphers only.
_TLS12_CIPHERS: Final = "ECDHE+AESGCM:ECDHE+CHACHA20"
_CA_DAYS: Final = 3650
_LEAF_DAYS: Final = 397  # what browsers accept for a leaf's lifetime
_RENEW_BEFORE: Final = datetime.timedelta(days=30)


class TLSFilesError(Exception):
    """A certificate or key file that cannot be used; the message names the file and why."""


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    """A server context with *cert* (PEM chain) and *key* loaded, modern settings only."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(_TLS12_CIPHERS)
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_NO_RENEGOTIATION
    context.set_alpn_protocols(list(ALPN_PROTOCOLS))
    _load_chain(context, cert, key)
    return context


def _load_chain(context: ssl.SSLContext, cert: Path, key: Path) -> None:
    try:
        context.load_cert_chain(certfile=cert, keyfile=key)
    except FileNotFoundError as exc:
        raise TLSFilesError(f"TLS file not found: {exc.filename}") from None
    except ssl.SSLError as exc:
        raise TLSFilesError(
            f"cannot use the TLS certificate {cert} with the key {key}: {exc.reason or exc}"
        ) from None
    except OSError as exc:
        raise TLSFilesError(f"cannot read TLS files {cert}, {key}: {exc.strerror}") from None


@attrs.define
class ServerTLS:
    """The API port's TLS: the context and the files it was loaded from."""

    cert: Path
    key: Path
    context: ssl.SSLContext

    @classmethod
    def load(cls, cert: Path, key: Path) -> ServerTLS:
        return cls(cert, key, server_context(cert, key))

    def reload(self) -> bool:
        """Load the files again into the same context; False (old chain kept) if unusable."""
        try:
            _load_chain(self.context, self.cert, self.key)
        except TLSFilesError as exc:
            log.error("TLS reload failed, keeping the certificate in use: %s", exc)
            return False
        log.info("TLS certificate reloaded from %s", self.cert)
        return True


@attrs.frozen
class LocalCertificates:
    """``up --tls``'s files: the CA a client trusts, and the server's certificate and key."""

    ca_cert: Path
    cert: Path
    key: Path


def ensure_local_ca(directory: Path, names: tuple[str, ...]) -> LocalCertificates:
    """The CA and a server certificate for *names* (host names and IP addresses) under
    *directory*, made when missing, near expiry or for other names. Blocking: call it in a
    worker thread."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    directory.chmod(0o700)
    files = LocalCertificates(
        ca_cert=directory / "ca.pem", cert=directory / "server.pem", key=directory / "server.key"
    )
    ca_key_file = directory / "ca.key"
    now = datetime.datetime.now(datetime.UTC)
    if files.ca_cert.exists() and ca_key_file.exists():
        ca_cert = x509.load_pem_x509_certificate(files.ca_cert.read_bytes())
        loaded = serialization.load_pem_private_key(ca_key_file.read_bytes(), password=None)
        if not isinstance(loaded, ec.EllipticCurvePrivateKey):
            raise TLSFilesError(f"{ca_key_file} is not the EC key devyard made")
        ca_key = loaded
    else:
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_cert = _ca_certificate(ca_key, now)
        _write(ca_key_file, _pem_key(ca_key), 0o600)
        _write(files.ca_cert, ca_cert.public_bytes(serialization.Encoding.PEM), 0o644)
        log.info("made a local certificate authority in %s", files.ca_cert)
    if not _leaf_is_current(files, ca_cert, names, now):
        leaf_key = ec.generate_private_key(ec.SECP256R1())
        leaf = _leaf_certificate(leaf_key, ca_key, ca_cert, names, now)
        _write(files.key, _pem_key(leaf_key), 0o600)
        _write(files.cert, leaf.public_bytes(serialization.Encoding.PEM), 0o644)
    return files


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write(path: Path, data: bytes, mode: int) -> None:
    """Write *data* to *path* whole (a temporary file renamed over it), with *mode*."""
    temporary = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    os.replace(temporary, path)


def _ca_certificate(key: ec.EllipticCurvePrivateKey, now: datetime.datetime) -> x509.Certificate:
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "devyard local"),
            x509.NameAttribute(NameOID.COMMON_NAME, "devyard local CA"),
        ]
    )
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=_CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )


def _san(names: tuple[str, ...]) -> list[x509.GeneralName]:
    entries: list[x509.GeneralName] = []
    for name in names:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            entries.append(x509.DNSName(name))
    return entries


def _leaf_certificate(
    key: ec.EllipticCurvePrivateKey,
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    names: tuple[str, ...],
    now: datetime.datetime,
) -> x509.Certificate:
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=_LEAF_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(_san(names)), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )


def _leaf_is_current(
    files: LocalCertificates,
    ca_cert: x509.Certificate,
    names: tuple[str, ...],
    now: datetime.datetime,
) -> bool:
    if not (files.cert.exists() and files.key.exists()):
        return False
    leaf = x509.load_pem_x509_certificate(files.cert.read_bytes())
    if leaf.issuer != ca_cert.subject or leaf.not_valid_after_utc - _RENEW_BEFORE < now:
        return False
    try:
        san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    return set(san) == set(_san(names))
