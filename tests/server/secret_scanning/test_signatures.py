"""The report signature: GitHub's published test vectors, their negatives, and the key ring
against a real key endpoint on loopback."""

from __future__ import annotations

import json

import pytest
import trio

from devyard.server.secret_scanning import (
    KeyRing,
    SignatureError,
    SignatureReason,
    load_public_keys,
    verify_signature,
)
from devyard.server.secret_scanning.signatures import fetch_keys
from tests.ports import free_port

from .conftest import KeyServer, Signer

# GitHub's key endpoint answer holding both published keys (as copied into getsentry/sentry
# tests/sentry/utils/test_github.py; callbacks.md 5.2).
GITHUB_KEYS = {
    "public_keys": [
        {
            "key_identifier": "90a421169f0a406205f1563a953312f0be898d3c7b6c06b681aa86a874555f4a",
            "key": "-----BEGIN PUBLIC KEY-----\n"
            "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE9MJJHnMfn2+H4xL4YaPDA4RpJqUq\n"
            "kCmRCBnYERxZanmcpzQSXs1X/AljlKkbJ8qpVIW4clayyef9gWhFbNHWAA==\n"
            "-----END PUBLIC KEY-----\n",
            "is_current": False,
        },
        {
            "key_identifier": "bcb53661c06b4728e59d897fb6165d5c9cda0fd9cdf9d09ead458168deb7518c",
            "key": "-----BEGIN PUBLIC KEY-----\n"
            "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEYAGMWO8XgCamYKMJS6jc/qgvSlAd\n"
            "AjPuDPRcXU22YxgBrz+zoN19MzuRyW87qEt9/AmtoNP5GrobzUvQSyJFVw==\n"
            "-----END PUBLIC KEY-----\n",
            "is_current": True,
        },
    ]
}
# (key id, signature, payload): the current docs' vector and the 2022 docs' vector.
VECTORS = [
    (
        "bcb53661c06b4728e59d897fb6165d5c9cda0fd9cdf9d09ead458168deb7518c",
        "MEQCIQDaMKqrGnE27S0kgMrEK0eYBmyG0LeZismAEz/BgZyt7AIfXt9fErtRS4XaeSt/AO1RtBY66YcAdjxji410VQV4xg==",
        b'[{"source":"commit","token":"some_token","type":"some_type",'
        b'"url":"https://example.com/base-repo-url/"}]',
    ),
    (
        "90a421169f0a406205f1563a953312f0be898d3c7b6c06b681aa86a874555f4a",
        "MEUCIQDKZokqnCjrRtw0tni+2Ltvl/uiMJ1EGumEsp1BsNr32AIgQY1YXD2nlj+XNfGK4rBfkMJ1JDOQcYXxa2sY8FNkrKc=",
        b'[{"token":"some_token","type":"some_type","url":"some_url"}]',
    ),
]
KEYS = load_public_keys(json.dumps(GITHUB_KEYS).encode())


@pytest.mark.parametrize(("key_id", "signature", "payload"), VECTORS)
def test_githubs_published_vectors_verify_on_the_raw_body_only(
    key_id: str, signature: str, payload: bytes
) -> None:
    key = KEYS[key_id]
    assert verify_signature(key, payload, signature)
    assert not verify_signature(key, payload + b" ", signature)
    assert not verify_signature(key, json.dumps(json.loads(payload)).encode(), signature)
    other = next(k for i, k in KEYS.items() if i != key_id)
    assert not verify_signature(other, payload, signature)


def test_a_signature_that_is_not_base64_is_malformed() -> None:
    key_id, _, payload = VECTORS[0]
    with pytest.raises(SignatureError) as caught:
        verify_signature(KEYS[key_id], payload, "fake signature!")
    assert caught.value.reason is SignatureReason.MALFORMED


def test_the_key_document_skips_what_is_no_p256_key() -> None:
    document = {
        "public_keys": [
            {"key_identifier": "x", "key": "not a pem"},
            {"key_identifier": 5, "key": "-"},
            "junk",
            GITHUB_KEYS["public_keys"][0],
        ]
    }
    assert set(load_public_keys(json.dumps(document).encode())) == {
        GITHUB_KEYS["public_keys"][0]["key_identifier"]
    }
    for bad in (b"[", b"[]", b'{"public_keys": 3}'):
        with pytest.raises(ValueError, match="key endpoint"):
            load_public_keys(bad)


async def test_the_ring_verifies_githubs_vectors_fetched_from_a_real_endpoint(
    key_server: KeyServer,
) -> None:
    key_server.document = json.dumps(GITHUB_KEYS).encode()
    ring = KeyRing(key_server.url)
    for key_id, signature, payload in VECTORS:
        await ring.verify(payload, key_id, signature)
        with pytest.raises(SignatureError) as caught:
            await ring.verify(payload + b"\n", key_id, signature)
        assert caught.value.reason is SignatureReason.INVALID
    assert key_server.requests == 1  # cached by identifier


async def test_an_unknown_identifier_refetches_once_per_cooldown(
    key_server: KeyServer, signer: Signer
) -> None:
    now = [0.0]
    ring = KeyRing(key_server.url, clock=lambda: now[0], cooldown=60.0)
    body = b"[]"
    await ring.verify(body, signer.key_id, signer.sign(body))
    rotated = Signer(key_id="cd" * 32)
    key_server.publish(signer.entry(current=False), rotated.entry())
    now[0] = 10.0  # within the cooldown: no new fetch, the new key is unknown
    with pytest.raises(SignatureError) as caught:
        await ring.verify(body, rotated.key_id, rotated.sign(body))
    assert caught.value.reason is SignatureReason.UNKNOWN_KEY
    assert key_server.requests == 1
    now[0] = 61.0  # the cooldown is over: an unknown identifier fetches again
    await ring.verify(body, rotated.key_id, rotated.sign(body))
    await ring.verify(body, signer.key_id, signer.sign(body))
    assert key_server.requests == 2
    with pytest.raises(SignatureError) as caught:
        await ring.verify(body, rotated.key_id, signer.sign(body))  # wrong key for the id
    assert caught.value.reason is SignatureReason.INVALID


async def test_missing_or_oversized_headers_are_refused_without_a_fetch(
    key_server: KeyServer,
) -> None:
    ring = KeyRing(key_server.url)
    cases = [(None, "x", SignatureReason.MISSING), ("id", "", SignatureReason.MISSING)]
    cases.append(("i" * 300, "x", SignatureReason.MALFORMED))
    for key_id, signature, reason in cases:
        with pytest.raises(SignatureError) as caught:
            await ring.verify(b"[]", key_id, signature)
        assert caught.value.reason is reason
    assert key_server.requests == 0


async def test_an_endpoint_that_fails_makes_the_keys_unavailable(key_server: KeyServer) -> None:
    key_server.status = 500
    ring = KeyRing(key_server.url)
    with pytest.raises(SignatureError) as caught:
        await ring.key("ab")
    assert caught.value.reason is SignatureReason.KEYS_UNAVAILABLE
    assert "500" in caught.value.message
    key_server.status = 200
    key_server.document = b"not json"
    with pytest.raises(SignatureError) as caught:
        await KeyRing(key_server.url).key("ab")
    assert caught.value.reason is SignatureReason.KEYS_UNAVAILABLE


async def test_a_slow_endpoint_is_given_up_on_in_bounded_time(key_server: KeyServer) -> None:
    key_server.hold.clear()
    try:
        started = trio.current_time()
        with pytest.raises(SignatureError) as caught:
            await fetch_keys(key_server.url, within=0.5)
        assert caught.value.reason is SignatureReason.KEYS_UNAVAILABLE
        assert trio.current_time() - started < 5
    finally:
        key_server.hold.set()


async def test_an_endpoint_nobody_listens_on_is_unavailable() -> None:
    with pytest.raises(SignatureError) as caught:
        await fetch_keys(f"http://127.0.0.1:{free_port()}/keys", within=5)
    assert caught.value.reason is SignatureReason.KEYS_UNAVAILABLE
