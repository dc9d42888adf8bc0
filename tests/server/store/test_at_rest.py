"""What the database holds: never a secret in retrievable form."""

from __future__ import annotations

from devyard.server.store import Role, Store
from devyard.server.store.database import Dialect, Tx
from devyard.server.store.tokens import hash_secret, new_api_key

from .test_migrations import open_database


def every_value(tx: Tx) -> list[str]:
    """Every value of every column of every table, as text."""
    if tx.dialect is Dialect.POSTGRESQL:
        tables = tx.fetchall(
            "SELECT table_name AS name FROM information_schema.tables"
            " WHERE table_schema = current_schema()"
        )
    else:
        tables = tx.fetchall("SELECT name FROM sqlite_master WHERE type = 'table'")
    values: list[str] = []
    for table in tables:
        name = table["name"]
        assert name.isidentifier()
        for row in tx.fetchall(f"SELECT * FROM {name}"):  # our own table names
            values.extend(str(value) for value in row.values())
    return values


async def test_api_key_secret_is_stored_only_as_a_hash(store: Store, database_target: str) -> None:
    org = await store.create_organization("acme")
    user = await store.create_user("alice")
    await store.add_membership(org.id, user.id, Role.ADMIN)
    secret = new_api_key()
    await store.create_api_key(
        org_id=org.id,
        user_id=user.id,
        name="k",
        lookup_id=secret.lookup_id,
        secret_hash=secret.secret_hash,
    )
    secret_part = secret.plaintext.rsplit("_", 1)[1]
    async with open_database(database_target) as db:
        values = await db.read(every_value)
    assert secret.secret_hash in values  # the dump does see the api_keys row
    assert hash_secret(secret.plaintext) == secret.secret_hash
    assert not any(secret_part in value for value in values)
    assert not any(secret.plaintext in value for value in values)
