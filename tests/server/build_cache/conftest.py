"""The control API's fixtures (tests/server/api/conftest.py) with a small build cache."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from quart_trio import QuartTrio

from devyard.server.api.app import api_state, create_app
from devyard.server.api.contract import Contract, load_document
from devyard.server.build_cache import BuildCacheSettings
from devyard.server.config import RateLimitConfig, ServerConfig
from devyard.server.store import Store
from tests.server.api.conftest import ManualClock, callers, client, manual_clock, store

__all__ = ["callers", "client", "manual_clock", "store"]

KIB = 1024


@pytest.fixture
def config(tmp_path: Path) -> ServerConfig:
    # entries past the API's own body limit (64 KiB here), an organization bound of 3 of them
    return ServerConfig(
        data_dir=tmp_path,
        rate_limit=RateLimitConfig(enabled=True, rate=1000.0, burst=1000),
        max_body_bytes=64 * KIB,
        build_cache=BuildCacheSettings(max_bytes=3 * 100 * KIB, max_entry=150 * KIB),
    )


@functools.cache
def _contract() -> Contract:
    return Contract(load_document())  # compiling its validators is most of an app's start


@pytest.fixture
def app(store: Store, config: ServerConfig, manual_clock: ManualClock) -> QuartTrio:
    return create_app(api_state(store, config, clock=manual_clock, contract=_contract()))
