"""The relying party of single sign-on (OpenID Connect, authorization code with PKCE and a
nonce): discovery, the token request, the id token's validation. docs/accounts.md.

- Discovery: ``{issuer}/.well-known/openid-configuration``, whose ``issuer`` must be the
  configured one exactly; kept `METADATA_TTL_S`.
- Keys: the provider's JWKS, kept until a token names a ``kid`` it does not hold; then fetched
  again, which is how a key rotation is followed; at most `MAX_REFETCHES` times per
  `REFETCH_WINDOW_S` per provider, so a stream of tokens with made-up kids cannot make the
  server hammer the provider.
- The id token: signature (joserfc, asymmetric algorithms only: never ``none`` nor HMAC with
  the client secret), ``iss``, ``aud`` (the client id; ``azp`` too when there are several),
  ``exp``, ``iat``, ``sub``, and the nonce (the caller compares it with the login's).
- HTTP: httpx's async client (on trio), every request bounded by the configured timeout, no
  redirects followed, a body of at most `MAX_BODY` bytes, and pinned to an address the
  server's `AddressPolicy` allows (public, or a network the operator listed), checked once per
  request (`devyard.core.pinning`): a tenant's issuer cannot point the server at its own
  loopback or private network, by name or by DNS rebinding.

Every failure is an `OidcError` with an `OidcFailure` reason; its message never holds a
token, a code, a secret or a nonce.
"""

from __future__ import annotations

import enum
import json
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from typing import Any, Final

import attrs
import httpx
import trio
from authlib.oauth2.rfc7636 import create_s256_code_challenge
from joserfc import jws, jwt
from joserfc.errors import InvalidKeyIdError, JoseError
from joserfc.jwk import KeySet

from ...core.pinning import AddressPolicy, PinningError, pin

__all__ = [
    "ALGORITHMS",
    "IdToken",
    "OidcClient",
    "OidcError",
    "OidcFailure",
    "ProviderMetadata",
    "s256_challenge",
]

ALGORITHMS: Final = (
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "ES256",
    "ES384",
    "EdDSA",
)
METADATA_TTL_S: Final = 3600.0
MAX_REFETCHES: Final = 5
REFETCH_WINDOW_S: Final = 60.0
MAX_BODY: Final = 512 * 1024
LEEWAY_S: Final = 60
_MAX_PROVIDERS: Final = 1000


class OidcFailure(enum.StrEnum):
    PROVIDER_UNAVAILABLE = "provider_unavailable"  # no answer, or not a usable one
    TOKEN_REQUEST = "token_request_refused"  # noqa: S105 - the provider refused the code
    INVALID_ID_TOKEN = "invalid_id_token"  # noqa: S105 - signature, claims, nonce


class OidcError(Exception):
    def __init__(self, reason: OidcFailure, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def s256_challenge(verifier: str) -> str:
    """PKCE's S256 challenge of *verifier* (RFC 7636), by authlib."""
    challenge: str = create_s256_code_challenge(verifier)
    return challenge


@attrs.frozen
class ProviderMetadata:
    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str


@attrs.frozen
class IdToken:
    """The validated claims the server uses."""

    subject: str
    email: str | None
    email_verified: bool
    nonce: str = attrs.field(repr=False)
    preferred_username: str | None = None


@attrs.define
class _Keys:
    keys: KeySet
    refetches: deque[float] = attrs.Factory(deque)  # when it was fetched again, in the window


def _endpoint(doc: Mapping[str, Any], name: str, issuer: str) -> str:
    """An endpoint of the discovery document: https, or plain http only for an http issuer
    (which the connection admits only on loopback, for development)."""
    value = doc.get(name)
    schemes = ("https://", "http://") if issuer.startswith("http://") else ("https://",)
    if not isinstance(value, str) or not value.startswith(schemes):
        raise OidcError(OidcFailure.PROVIDER_UNAVAILABLE, f"discovery: no usable {name}")
    return value


class OidcClient:
    """Shared by the requests of one server: it caches discovery documents and key sets."""

    def __init__(
        self,
        *,
        timeout_s: float,
        addresses: AddressPolicy | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._timeout = timeout_s
        self._addresses = addresses or AddressPolicy()
        self._clock = clock
        self._metadata: OrderedDict[str, tuple[ProviderMetadata, float]] = OrderedDict()
        self._keys: OrderedDict[str, _Keys] = OrderedDict()

    def __repr__(self) -> str:
        return f"<OidcClient providers={len(self._metadata)}>"

    # -- HTTP --------------------------------------------------------------------------------
    async def _fetch_json(
        self,
        url: str,
        *,
        what: str,
        form: Mapping[str, str] | None = None,
        auth: tuple[str, str] | None = None,
    ) -> tuple[int, Any]:
        try:
            with trio.fail_after(self._timeout):
                pinned = await pin(url, self._addresses)
        except (PinningError, trio.TooSlowError) as exc:
            message = str(exc) if isinstance(exc, PinningError) else "the name did not resolve"
            raise OidcError(OidcFailure.PROVIDER_UNAVAILABLE, f"{what}: {message}") from None
        headers = {"Accept": "application/json", **pinned.headers}
        try:
            async with httpx.AsyncClient(timeout=self._timeout, follow_redirects=False) as client:
                if form is None:
                    request = client.build_request(
                        "GET", pinned.url, headers=headers, extensions=pinned.extensions
                    )
                else:
                    request = client.build_request(
                        "POST",
                        pinned.url,
                        data=dict(form),
                        headers=headers,
                        extensions=pinned.extensions,
                    )
                basic = None if auth is None else httpx.BasicAuth(*auth)
                response = await client.send(request, auth=basic, stream=True)
                try:
                    chunks = bytearray()
                    async for chunk in response.aiter_bytes():
                        chunks += chunk
                        if len(chunks) > MAX_BODY:
                            raise OidcError(
                                OidcFailure.PROVIDER_UNAVAILABLE, f"{what}: answer too large"
                            )
                finally:
                    await response.aclose()
        except httpx.HTTPError as exc:
            raise OidcError(
                OidcFailure.PROVIDER_UNAVAILABLE, f"{what}: {type(exc).__name__}"
            ) from None
        try:
            return response.status_code, json.loads(bytes(chunks))
        except ValueError:
            raise OidcError(OidcFailure.PROVIDER_UNAVAILABLE, f"{what}: not JSON") from None

    # -- discovery and keys ------------------------------------------------------------------
    async def metadata(self, issuer: str) -> ProviderMetadata:
        now = self._clock()
        cached = self._metadata.get(issuer)
        if cached is not None and now - cached[1] < METADATA_TTL_S:
            return cached[0]
        status, doc = await self._fetch_json(
            issuer + "/.well-known/openid-configuration", what="discovery"
        )
        if status != 200 or not isinstance(doc, dict):
            raise OidcError(OidcFailure.PROVIDER_UNAVAILABLE, f"discovery: HTTP {status}")
        if doc.get("issuer") != issuer:
            raise OidcError(
                OidcFailure.PROVIDER_UNAVAILABLE, "discovery: the document names another issuer"
            )
        metadata = ProviderMetadata(
            issuer=issuer,
            authorization_endpoint=_endpoint(doc, "authorization_endpoint", issuer),
            token_endpoint=_endpoint(doc, "token_endpoint", issuer),
            jwks_uri=_endpoint(doc, "jwks_uri", issuer),
        )
        self._metadata[issuer] = (metadata, now)
        self._metadata.move_to_end(issuer)
        if len(self._metadata) > _MAX_PROVIDERS:
            self._metadata.popitem(last=False)
        return metadata

    async def _fetch_keys(self, jwks_uri: str) -> KeySet:
        status, doc = await self._fetch_json(jwks_uri, what="JWKS")
        if status != 200 or not isinstance(doc, dict):
            raise OidcError(OidcFailure.PROVIDER_UNAVAILABLE, f"JWKS: HTTP {status}")
        try:
            keys = KeySet.import_key_set(doc)  # type: ignore[arg-type]
        except (JoseError, ValueError, KeyError, TypeError):
            raise OidcError(OidcFailure.PROVIDER_UNAVAILABLE, "JWKS: not a key set") from None
        old = self._keys.get(jwks_uri)
        self._keys[jwks_uri] = _Keys(keys=keys, refetches=deque() if old is None else old.refetches)
        self._keys.move_to_end(jwks_uri)
        if len(self._keys) > _MAX_PROVIDERS:
            self._keys.popitem(last=False)
        return keys

    async def _key_set(self, jwks_uri: str, *, refresh: bool) -> KeySet:
        cached = self._keys.get(jwks_uri)
        if cached is None:
            return await self._fetch_keys(jwks_uri)
        if not refresh:
            return cached.keys
        now = self._clock()
        while cached.refetches and now - cached.refetches[0] >= REFETCH_WINDOW_S:
            cached.refetches.popleft()
        if len(cached.refetches) >= MAX_REFETCHES:
            return cached.keys  # the token fails on its unknown kid
        cached.refetches.append(now)
        return await self._fetch_keys(jwks_uri)

    # -- the code and the token ----------------------------------------------------------------
    async def exchange_code(
        self,
        metadata: ProviderMetadata,
        *,
        code: str,
        redirect_uri: str,
        verifier: str,
        client_id: str,
        client_secret: str | None,
    ) -> str:
        """The id token the provider gives for *code* (``client_secret_basic`` when there is a
        secret, else a public client)."""
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": redirect_uri,
            "code_verifier": verifier,
        }
        auth = None
        if client_secret is None:
            form["client_id"] = client_id
        else:
            auth = (client_id, client_secret)
        status, answer = await self._fetch_json(
            metadata.token_endpoint, what="token request", form=form, auth=auth
        )
        if status != 200 or not isinstance(answer, dict):
            error = answer.get("error") if isinstance(answer, dict) else None
            detail = error if isinstance(error, str) and error.isascii() else f"HTTP {status}"
            raise OidcError(OidcFailure.TOKEN_REQUEST, f"the provider refused: {detail[:60]}")
        id_token = answer.get("id_token")
        if not isinstance(id_token, str):
            raise OidcError(OidcFailure.TOKEN_REQUEST, "the provider gave no id_token")
        return id_token

    async def validate(
        self, metadata: ProviderMetadata, id_token: str, *, client_id: str
    ) -> IdToken:
        """The claims of *id_token* once its signature, issuer, audience and times hold. The
        caller still compares the nonce with its login's."""
        try:
            header = jws.extract_compact(id_token.encode()).headers()
        except (JoseError, ValueError):
            raise OidcError(OidcFailure.INVALID_ID_TOKEN, "the id token is not a JWS") from None
        if header.get("alg") not in ALGORITHMS:
            raise OidcError(OidcFailure.INVALID_ID_TOKEN, "the id token's algorithm is refused")
        keys = await self._key_set(metadata.jwks_uri, refresh=False)
        try:
            token = self._decode(id_token, keys)
        except InvalidKeyIdError:
            # A key we do not know yet: the provider may have rotated. Fetch again (bounded).
            keys = await self._key_set(metadata.jwks_uri, refresh=True)
            try:
                token = self._decode(id_token, keys)
            except JoseError as exc:
                raise OidcError(
                    OidcFailure.INVALID_ID_TOKEN, f"the id token does not verify: {exc.error}"
                ) from None
        except JoseError as exc:
            raise OidcError(
                OidcFailure.INVALID_ID_TOKEN, f"the id token does not verify: {exc.error}"
            ) from None
        claims = token.claims
        registry = jwt.JWTClaimsRegistry(
            now=int(time.time()),
            leeway=LEEWAY_S,
            iss={"essential": True, "value": metadata.issuer},
            aud={"essential": True, "value": client_id},
            sub={"essential": True},
            exp={"essential": True},
            iat={"essential": True},
            nonce={"essential": True},
        )
        try:
            registry.validate(claims)
        except JoseError as exc:
            raise OidcError(
                OidcFailure.INVALID_ID_TOKEN,
                f"the id token is refused: {exc.error} {exc.description or ''}".strip(),
            ) from None
        audience = claims["aud"]
        if isinstance(audience, list) and len(audience) > 1 and claims.get("azp") != client_id:
            raise OidcError(OidcFailure.INVALID_ID_TOKEN, "the id token is for another party")
        email = claims.get("email")
        username = claims.get("preferred_username")
        return IdToken(
            subject=str(claims["sub"]),
            email=email if isinstance(email, str) else None,
            email_verified=claims.get("email_verified") is True,
            nonce=str(claims["nonce"]),
            preferred_username=username if isinstance(username, str) else None,
        )

    @staticmethod
    def _decode(id_token: str, keys: KeySet) -> jwt.Token:
        return jwt.decode(id_token, keys, algorithms=list(ALGORITHMS))
