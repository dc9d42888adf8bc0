"""The control API fixtures (a store on both backends, the app, callers of each role)."""

from tests.server.api.conftest import (  # noqa: F401 - fixtures, used by name
    app,
    callers,
    client,
    config,
    manual_clock,
    store,
)
