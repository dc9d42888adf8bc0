"""The scoped-token tests' fixtures (a store clock the test sets, the API, callers)."""

from __future__ import annotations

from tests.server.tokens.conftest import (  # fixtures, used by name
    app,
    callers,
    client,
    config,
    manual_clock,
    store,
    store_clock,
)

__all__ = ["app", "callers", "client", "config", "manual_clock", "store", "store_clock"]
