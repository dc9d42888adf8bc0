"""tokens.py and ids.py: pure functions, no database."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from devyard.server.store import Kind, is_id, new_id
from devyard.server.store.tokens import (
    hash_secret,
    new_api_key,
    new_secret,
    parse_api_key,
    verify_api_key,
)


def test_api_key_has_scannable_prefix_lookup_and_256_bit_secret() -> None:
    key = new_api_key()
    # 43 characters of secret, then the 6-character CRC32 checksum (docs/security.md)
    assert re.fullmatch(r"dy_[0-9A-Za-z]{12}_[0-9A-Za-z]{43}[0-9A-Za-z]{6}", key.plaintext)
    assert key.plaintext.split("_")[1] == key.lookup_id
    assert parse_api_key(key.plaintext) == key.lookup_id


def test_stored_hash_is_sha256_of_the_key_not_the_key() -> None:
    key = new_api_key()
    assert key.secret_hash == hash_secret(key.plaintext)
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", key.secret_hash)
    secret_part = key.plaintext.rsplit("_", 1)[1]
    assert secret_part not in key.secret_hash


def test_verify_accepts_the_key_and_rejects_any_other() -> None:
    key, other = new_api_key(), new_api_key()
    assert verify_api_key(key.plaintext, key.secret_hash)
    assert not verify_api_key(other.plaintext, key.secret_hash)
    tampered = key.plaintext[:-1] + ("a" if key.plaintext[-1] != "a" else "b")
    assert not verify_api_key(tampered, key.secret_hash)


def test_keys_are_unique() -> None:
    keys = [new_api_key() for _ in range(200)]
    assert len({k.plaintext for k in keys}) == 200
    assert len({k.lookup_id for k in keys}) == 200


def test_repr_never_shows_the_secret_or_its_hash() -> None:
    key = new_api_key()
    assert key.plaintext not in repr(key)
    assert key.secret_hash not in repr(key)
    assert key.lookup_id in repr(key)


def test_other_prefixes_are_not_api_keys() -> None:
    token = new_secret("dyt")
    assert token.plaintext.startswith("dyt_")
    assert parse_api_key(token.plaintext) is None


@given(st.text(max_size=80))
def test_parse_api_key_accepts_only_the_exact_form(text: str) -> None:
    lookup = parse_api_key(text)
    if lookup is not None:
        assert text.startswith(f"dy_{lookup}_")
        assert len(text) in (3 + 12 + 1 + 43, 3 + 12 + 1 + 43 + 6)  # old form, checksummed


def test_ids_carry_their_kind_and_sort_in_creation_order() -> None:
    ids = [new_id(Kind.ORGANIZATION) for _ in range(1000)]
    assert ids == sorted(ids)
    assert len(set(ids)) == 1000
    assert all(is_id(Kind.ORGANIZATION, i) for i in ids)
    assert all(re.fullmatch(r"org_[0-9A-HJKMNP-TV-Z]{26}", i) for i in ids)


def test_is_id_rejects_other_kinds_and_malformed_values() -> None:
    user_id = new_id(Kind.USER)
    assert is_id(Kind.USER, user_id)
    assert not is_id(Kind.ORGANIZATION, user_id)
    assert not is_id(Kind.USER, user_id.lower())
    assert not is_id(Kind.USER, user_id + "0")
    assert not is_id(Kind.USER, "usr_")
    assert not is_id(Kind.USER, "usr")
    assert not is_id(Kind.USER, "usr_8" + "0" * 25)  # would overflow 128 bits
