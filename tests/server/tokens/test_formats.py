"""Token formats: a prefix per kind and a CRC32 checksum, so that a scanner's regular
expression finds our tokens with few false positives (docs/security.md), while tokens issued
before the checksum keep working."""

from __future__ import annotations

import re
import secrets
from pathlib import Path

import pytest

from devyard.server.edge.tokens import HostTokens, create_host_token
from devyard.server.store import tokens
from devyard.server.store.tokens import SCANNER_PATTERNS, TokenKind
from devyard.server.tunnels import parse_tunnel_token

_DOCS = Path(__file__).resolve().parents[3] / "docs" / "security.md"
_ALNUM = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _random62(n: int) -> str:
    return "".join(secrets.choice(_ALNUM) for _ in range(n))


@pytest.mark.parametrize("kind", list(TokenKind))
def test_a_new_token_matches_its_own_scanner_pattern_and_no_other(kind: TokenKind) -> None:
    token = tokens.new_token(kind).plaintext
    assert token.startswith(tokens.PREFIXES[kind] + "_")
    matching = {k for k, p in SCANNER_PATTERNS.items() if re.search(p, f"x = '{token}'\n")}
    assert matching == {kind}
    assert tokens.kind_of(token) is kind
    assert tokens.parse_token(kind, token) is not None


@pytest.mark.parametrize("kind", list(TokenKind))
def test_the_scanner_pattern_does_not_match_inside_a_longer_word(kind: TokenKind) -> None:
    token = tokens.new_token(kind).plaintext
    assert re.search(SCANNER_PATTERNS[kind], "a" + token) is None
    assert re.search(SCANNER_PATTERNS[kind], token + "a") is None


def test_one_changed_character_fails_the_checksum() -> None:
    token = tokens.new_api_key().plaintext
    for i in range(len("dy_"), len(token)):
        if token[i] == "_":
            continue
        changed = token[:i] + ("A" if token[i] != "A" else "B") + token[i + 1 :]
        assert tokens.parse_api_key(changed) is None, i


def test_random_strings_of_the_right_shape_are_not_ours() -> None:
    fakes = [f"dy_{_random62(12)}_{_random62(49)}" for _ in range(2000)]
    assert all(re.fullmatch(SCANNER_PATTERNS[TokenKind.API_KEY], fake) for fake in fakes)
    # The checksum turns them down: a false positive is about 1 in 2**32.
    assert [fake for fake in fakes if tokens.parse_api_key(fake) is not None] == []


def test_tokens_issued_before_the_checksum_still_parse_and_verify() -> None:
    lookup = _random62(12)
    legacy_key = f"dy_{lookup}_{_random62(43)}"
    assert tokens.parse_api_key(legacy_key) == lookup
    assert tokens.verify_api_key(legacy_key, tokens.hash_secret(legacy_key))
    legacy_scoped = f"dyst_{lookup}_{_random62(43)}"
    assert tokens.parse_scoped_token(legacy_scoped) == lookup
    assert parse_tunnel_token(f"dyt_{lookup}_{_random62(43)}") == lookup
    # ...but an old-shaped token is no API key of another kind
    assert tokens.parse_api_key(legacy_scoped) is None
    assert tokens.parse_api_key(f"dy_{lookup}_{_random62(44)}") is None


def test_host_tokens_new_and_old_verify(tmp_path: Path) -> None:
    path = tmp_path / "host-tokens"
    host_id, token = create_host_token(path)
    assert re.fullmatch(SCANNER_PATTERNS[TokenKind.HOST_TOKEN], token)
    legacy_id = secrets.token_hex(6)
    legacy = f"dyh_{legacy_id}_{secrets.token_urlsafe(32)}"
    with path.open("a") as out:
        out.write(f"{legacy_id} {tokens.hash_secret(legacy).removeprefix('sha256:')}\n")
    host_tokens = HostTokens(path)
    assert host_tokens.verify(token) == host_id
    assert host_tokens.verify(legacy) == f"host_{legacy_id}"
    assert host_tokens.verify(token[:-1] + ("A" if token[-1] != "A" else "B")) is None


def test_new_secret_refuses_an_unknown_prefix() -> None:
    with pytest.raises(ValueError, match="prefix"):
        tokens.new_secret("zz")


def test_docs_state_every_scanner_pattern() -> None:
    text = _DOCS.read_text()
    for kind, pattern in SCANNER_PATTERNS.items():
        assert pattern in text, kind
