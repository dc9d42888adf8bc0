"""The first organization, admin and API key: ``devyard up``'s first start and
``devyard admin bootstrap``.

Both are operator actions with direct access to the store, so they need no API key. The
plaintext key they mint is returned once, for the caller to print and (``up``) to write to
``DATA_DIR/admin-api-key`` with mode 0600; the store keeps only its hash.

``devyard up`` bootstraps when the store has no organization at all. It creates the store
rows first and writes the key file second: a crash in between leaves an organization and no
file, and the next start says so and points at ``devyard admin bootstrap`` rather than
minting a key nobody asked for.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

import attrs
import trio

from .store import errors as store_errors
from .store import tokens
from .store.base import ApiKey, Organization, Role, Store, User

__all__ = [
    "DEFAULT_ADMIN_USER",
    "DEFAULT_ORGANIZATION",
    "Bootstrapped",
    "FirstStart",
    "bootstrap_organization",
    "first_start",
    "write_secret_file",
]

DEFAULT_ORGANIZATION: Final = "default"
DEFAULT_ADMIN_USER: Final = "admin"


@attrs.frozen
class Bootstrapped:
    organization: Organization
    user: User
    api_key: ApiKey
    plaintext_key: str = attrs.field(repr=False)


async def bootstrap_organization(
    store: Store,
    *,
    org_name: str,
    user_name: str = DEFAULT_ADMIN_USER,
    key_name: str = "bootstrap",
) -> Bootstrapped:
    """Make *user_name* an admin of *org_name* (creating either if missing) with a new key.

    Running it again for the same names is how an operator recovers a lost admin key.
    """
    try:
        organization = await store.get_organization_by_name(org_name)
    except store_errors.NotFound:
        organization = await store.create_organization(org_name)
    try:
        user = await store.get_user_by_name(user_name)
    except store_errors.NotFound:
        user = await store.create_user(user_name)
    try:
        membership = await store.get_membership(organization.id, user.id)
    except store_errors.NotFound:
        await store.add_membership(organization.id, user.id, Role.ADMIN)
    else:
        if membership.role != Role.ADMIN:
            await store.set_membership_role(organization.id, user.id, Role.ADMIN)
    secret = tokens.new_api_key()
    api_key = await store.create_api_key(
        org_id=organization.id,
        user_id=user.id,
        name=key_name,
        lookup_id=secret.lookup_id,
        secret_hash=secret.secret_hash,
    )
    return Bootstrapped(
        organization=organization, user=user, api_key=api_key, plaintext_key=secret.plaintext
    )


@attrs.frozen
class FirstStart:
    """What ``devyard up`` found: a key minted now (print it), or the state of an old one."""

    key_file: Path
    new_key: str | None = attrs.field(default=None, repr=False)  # set only on the first start
    key_file_exists: bool = True


def _write_secret_file(path: Path, secret: str) -> None:
    # O_EXCL: never overwrite a key file; 0600 from the first byte, not chmod afterwards.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(secret + "\n")


async def write_secret_file(path: Path, secret: str) -> None:
    """Create *path* with mode 0600 holding *secret*; FileExistsError if it exists."""
    await trio.to_thread.run_sync(_write_secret_file, path, secret)


async def first_start(store: Store, key_file: Path) -> FirstStart:
    """Bootstrap the default organization if the store has none, its admin an operator;
    write its key to *key_file*."""
    if await trio.to_thread.run_sync(key_file.exists):
        return FirstStart(key_file=key_file)
    if await store.list_organizations():
        return FirstStart(key_file=key_file, key_file_exists=False)
    result = await bootstrap_organization(store, org_name=DEFAULT_ORGANIZATION)
    # The first admin runs the deployment: an operator (docs/accounts.md), who may create
    # organizations when only operators may.
    await store.set_operator(result.user.id, True)
    await write_secret_file(key_file, result.plaintext_key)
    return FirstStart(key_file=key_file, new_key=result.plaintext_key)
