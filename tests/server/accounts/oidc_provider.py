"""A real OpenID provider on loopback for the single sign-on tests: authlib's provider side
(its Flask ``AuthorizationServer``, the authorization code grant with its PKCE extension
``CodeChallenge(required=True)`` and its OpenID extension ``OpenIDCode(require_nonce=True)``)
in a small Flask app served by werkzeug in a thread. Discovery and the JWKS are its own
routes. The authorization endpoint consents at once for `Provider.user` (no login page: the
tests are about the relying party).

It checks what a provider checks (the client, its secret, the redirect URI, the PKCE
verifier, single-use codes); the knobs make it misbehave the way a hostile or broken
provider would: sign with a key it does not publish (`forge`), name another audience
(`audience`), hand out an expired token (`expired`), give back an earlier id token
(`replay`, with `last_id_token` kept from an earlier sign-in), or rotate its signing key (`rotate`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any, Final

import attrs
from authlib.integrations.flask_oauth2 import AuthorizationServer
from authlib.oauth2.rfc6749 import AuthorizationCodeMixin, ClientMixin, OAuth2Error
from authlib.oauth2.rfc6749.grants import AuthorizationCodeGrant
from authlib.oauth2.rfc7636 import CodeChallenge
from authlib.oidc.core import UserInfo
from authlib.oidc.core.grants import OpenIDCode
from flask import Flask, jsonify, request
from joserfc.jwk import KeySet, RSAKey
from werkzeug.serving import make_server

from tests.ports import free_port

__all__ = ["Provider", "ProviderUser", "running_provider"]

CLIENT_ID = "devyard-test"
CLIENT_SECRET = "provider-client-secret"


@attrs.define
class ProviderUser:
    sub: str = "idp-user-1"
    email: str = "dana@example.com"
    email_verified: bool = True
    preferred_username: str | None = "dana"


def _key(kid: str) -> RSAKey:
    return RSAKey.generate_key(2048, parameters={"kid": kid, "use": "sig"}, private=True)


@attrs.define
class _Client(ClientMixin):  # type: ignore[misc]
    redirect_uri: str

    def get_client_id(self) -> str:
        return CLIENT_ID

    def get_default_redirect_uri(self) -> str:
        return self.redirect_uri

    def get_allowed_scope(self, scope: str) -> str:
        return " ".join(s for s in scope.split() if s in {"openid", "email", "profile"})

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        return redirect_uri == self.redirect_uri

    def check_client_secret(self, client_secret: str) -> bool:
        return client_secret == CLIENT_SECRET

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        return method == "client_secret_basic" if endpoint == "token" else True

    def check_response_type(self, response_type: str) -> bool:
        return response_type == "code"

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type == "authorization_code"


@attrs.define
class _Code(AuthorizationCodeMixin):  # type: ignore[misc]
    code: str
    redirect_uri: str
    scope: str
    nonce: str | None
    code_challenge: str | None
    code_challenge_method: str | None
    user: ProviderUser
    auth_time: int = attrs.Factory(lambda: int(time.time()))

    def get_redirect_uri(self) -> str:
        return self.redirect_uri

    def get_scope(self) -> str:
        return self.scope

    def get_nonce(self) -> str | None:
        return self.nonce

    def get_auth_time(self) -> int:
        return self.auth_time

    def get_acr(self) -> None:
        return None

    def get_amr(self) -> None:
        return None


#: What a server's ``accounts.oidc_allowed_networks`` must list to reach this provider: it
#: listens on loopback, which the server refuses by default (docs/accounts.md).
LOOPBACK: Final = ("127.0.0.0/8",)


class Provider:
    """The provider's state and knobs; the tests change the knobs between sign-ins."""

    def __init__(self, port: int, redirect_uri: str) -> None:
        self.issuer = f"http://127.0.0.1:{port}"
        self.client = _Client(redirect_uri=redirect_uri)
        self.lock = threading.Lock()
        self.user = ProviderUser()
        self.signing = _key("k1")
        self.published = [self.signing]
        self.codes: dict[str, _Code] = {}
        self.nonces: set[str] = set()
        self.jwks_requests = 0
        self.requests = 0  # every request the provider answered
        self.rotations = 0
        self._rogue: RSAKey | None = None
        self.last_id_token: str | None = None
        self.reset()

    def reset(self) -> None:
        self.user = ProviderUser()
        self.forge = False  # sign with a key of the same kid that the JWKS does not hold
        self.audience: str | None = None  # name this audience instead of the client
        self.expired = False  # issued two hours ago, expired one hour ago
        self.replay: str | None = None  # answer the token request with this earlier id token
        self.kid_override: str | None = None  # a kid the JWKS does not hold

    def rogue(self) -> RSAKey:
        """A key under the signing key's kid that the JWKS does not hold (made once)."""
        with self.lock:
            if self._rogue is None or self._rogue.kid != self.signing.kid:
                self._rogue = _key(self.signing.kid or "k1")
            return self._rogue

    def rotate(self) -> None:
        """A new signing key under a new kid, published alone (the old one is withdrawn)."""
        with self.lock:
            self.rotations += 1
            self.signing = _key(f"k{self.rotations + 1}")
            self.published = [self.signing]

    def jwks(self) -> dict[str, Any]:
        with self.lock:
            self.jwks_requests += 1
            keys: dict[str, Any] = dict(KeySet(list(self.published)).as_dict(private=False))
            return keys


def _open_id(provider: Provider) -> OpenIDCode:
    class _OpenIDCode(OpenIDCode):  # type: ignore[misc]
        def exists_nonce(self, nonce: str, request: Any) -> bool:
            return nonce in provider.nonces

        def resolve_client_private_key(self, client: Any) -> RSAKey:
            if provider.forge:
                return provider.rogue()
            return provider.signing

        def get_encode_header(self, client: Any) -> dict[str, str]:
            kid = provider.kid_override or provider.signing.kid or "k1"
            return {"alg": "RS256", "kid": kid}

        def get_client_claims(self, client: Any) -> dict[str, Any]:
            claims: dict[str, Any] = {
                "iss": provider.issuer,
                "aud": [provider.audience or CLIENT_ID],
            }
            if provider.expired:
                now = int(time.time())
                claims.update(iat=now - 7200, exp=now - 3600, auth_time=now - 7200)
            return claims

        def generate_user_info(self, user: ProviderUser, scope: str) -> UserInfo:
            info = UserInfo(sub=user.sub)
            if "email" in scope:
                info["email"] = user.email
                info["email_verified"] = user.email_verified
            if "profile" in scope and user.preferred_username:
                info["preferred_username"] = user.preferred_username
            return info

    return _OpenIDCode(require_nonce=True)


def _grant(provider: Provider) -> type[AuthorizationCodeGrant]:
    class _Grant(AuthorizationCodeGrant):  # type: ignore[misc]
        TOKEN_ENDPOINT_AUTH_METHODS = ["client_secret_basic"]  # noqa: RUF012 - authlib's API

        def save_authorization_code(self, code: str, request: Any) -> None:
            data = request.payload.data
            with provider.lock:
                provider.nonces.add(data.get("nonce"))
                provider.codes[code] = _Code(
                    code=code,
                    redirect_uri=request.payload.redirect_uri,
                    scope=request.payload.scope,
                    nonce=data.get("nonce"),
                    code_challenge=data.get("code_challenge"),
                    code_challenge_method=data.get("code_challenge_method"),
                    user=request.user,
                )

        def query_authorization_code(self, code: str, client: Any) -> _Code | None:
            with provider.lock:
                return provider.codes.get(code)

        def delete_authorization_code(self, authorization_code: _Code) -> None:
            with provider.lock:
                provider.codes.pop(authorization_code.code, None)

        def authenticate_user(self, authorization_code: _Code) -> ProviderUser:
            return authorization_code.user

    return _Grant


def _app(provider: Provider) -> Flask:
    app = Flask("oidc-test-provider")
    server = AuthorizationServer(
        app,
        query_client=lambda client_id: provider.client if client_id == CLIENT_ID else None,
        save_token=lambda token, request: None,
    )
    server.register_grant(_grant(provider), [CodeChallenge(required=True), _open_id(provider)])

    @app.before_request
    def count() -> None:
        with provider.lock:
            provider.requests += 1

    @app.get("/.well-known/openid-configuration")
    def discovery() -> Any:
        return jsonify(
            issuer=provider.issuer,
            authorization_endpoint=f"{provider.issuer}/authorize",
            token_endpoint=f"{provider.issuer}/token",
            jwks_uri=f"{provider.issuer}/jwks",
            response_types_supported=["code"],
            subject_types_supported=["public"],
            id_token_signing_alg_values_supported=["RS256"],
            code_challenge_methods_supported=["S256"],
        )

    @app.get("/jwks")
    def jwks() -> Any:
        return jsonify(provider.jwks())

    @app.get("/authorize")
    def authorize() -> Any:
        try:
            grant = server.get_consent_grant(end_user=provider.user)
        except OAuth2Error as error:
            return jsonify(error=error.error, error_description=error.description), 400
        return server.create_authorization_response(grant=grant, grant_user=provider.user)

    @app.post("/token")
    def token() -> Any:
        response = server.create_token_response()
        payload = response.get_json(silent=True) or {}
        if "id_token" in payload:
            provider.last_id_token = payload["id_token"]
            if provider.replay is not None:
                payload["id_token"] = provider.replay
                response.set_data(jsonify(payload).get_data())
        _ = request  # the grant read it
        return response

    return app


def running_provider(redirect_uri: str) -> Iterator[Provider]:
    """A provider on a free loopback port while the generator is open (a fixture's body)."""
    port = free_port()
    provider = Provider(port, redirect_uri)
    server = make_server("127.0.0.1", port, _app(provider), threaded=True)
    thread = threading.Thread(target=server.serve_forever, name="oidc-provider", daemon=True)
    thread.start()
    try:
        yield provider
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
