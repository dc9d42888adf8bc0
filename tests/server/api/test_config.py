"""The server config: defaults < file < environment < flags; unknown keys are errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from devyard.server.config import (
    ConfigError,
    ListenAddress,
    ServerConfig,
    load_server_config,
    redact_url,
)


def test_defaults_need_only_a_data_dir(tmp_path: Path) -> None:
    config = load_server_config(flags={"data_dir": str(tmp_path)})
    assert config.data_dir == tmp_path
    assert config.listen == ListenAddress("127.0.0.1", 8080)
    assert config.database_url is None
    assert config.base_url == "http://127.0.0.1:8080"
    assert config.sqlite_path == tmp_path / "devyard.sqlite3"
    assert config.rate_limit.enabled


def test_the_raw_link_port_is_off_unless_configured(tmp_path: Path) -> None:
    assert load_server_config(flags={"data_dir": str(tmp_path)}).link_listen is None
    config = load_server_config(
        flags={"data_dir": str(tmp_path)},
        env={"DEVYARD_LINK_LISTEN": "0.0.0.0:7443", "DEVYARD_LINK_TLS_CERT": "/c.pem"}
        | {"DEVYARD_LINK_TLS_KEY": "/k.pem"},
    )
    assert config.link_listen == ListenAddress("0.0.0.0", 7443)
    assert (config.link_tls_cert, config.link_tls_key) == (Path("/c.pem"), Path("/k.pem"))


def test_missing_data_dir_is_an_error() -> None:
    with pytest.raises(ConfigError, match="data_dir is required"):
        load_server_config()


def test_flags_beat_environment_beat_file(tmp_path: Path) -> None:
    file = tmp_path / "devyard.toml"
    file.write_text(
        'data_dir = "/from/file"\nlisten = "0.0.0.0:1"\nregion = "file-region"\n'
        "[rate_limit]\nrate = 5\nburst = 7\n"
    )
    env = {
        "DEVYARD_LISTEN": "127.0.0.2:2",
        "DEVYARD_RATE_LIMIT_BURST": "9",
        "DEVYARD_RATE_LIMIT_ENABLED": "false",
        "DEVYARD_API_KEY": "ignored: a client variable",
    }
    config = load_server_config(flags={"listen": "[::1]:3", "data_dir": None}, env=env, file=file)
    assert config.data_dir == Path("/from/file")
    assert config.listen == ListenAddress("::1", 3)
    assert config.region == "file-region"
    assert (config.rate_limit.rate, config.rate_limit.burst) == (5.0, 9)
    assert config.rate_limit.enabled is False
    assert config.base_url == "http://[::1]:3"


def test_the_file_can_come_from_the_environment_and_be_yaml(tmp_path: Path) -> None:
    file = tmp_path / "devyard.yaml"
    file.write_text("data_dir: /d\npublic_url: https://devyard.example.com/\n")
    config = load_server_config(env={"DEVYARD_CONFIG": str(file)})
    assert config.public_url == "https://devyard.example.com"
    assert config.base_url == "https://devyard.example.com"


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('data_dir = "/d"\ncolour = "red"\n', "unknown key 'colour'"),
        ('data_dir = "/d"\n[rate_limit]\nburts = 1\n', "unknown key 'rate_limit.burts'"),
        ('data_dir = "/d"\nlisten = "nope"\n', "listen: expected HOST:PORT"),
        ('data_dir = "/d"\nlisten = "h:70000"\n', "port must be"),
        ('data_dir = "/d"\ndatabase_url = "mysql://x"\n', "postgresql://"),
        ('data_dir = "/d"\npublic_url = "ftp://x"\n', "http"),
        ('data_dir = "/d"\n[rate_limit]\nrate = 0\n', "positive"),
        ('data_dir = "/d"\n[rate_limit]\nenabled = "perhaps"\n', "true or false"),
        ("data_dir = [\n", "devyard.toml"),
        ('data_dir = "/d"\nlink_listen = "7443"\n', "link_listen: expected HOST:PORT"),
        ('data_dir = "/d"\nlink_listen = "h:1"\nlink_tls_cert = "c"\n', "go together"),
        ('data_dir = "/d"\nlink_tls_cert = "c"\nlink_tls_key = "k"\n', "needs link_listen"),
    ],
)
def test_bad_files_name_the_key(tmp_path: Path, text: str, match: str) -> None:
    file = tmp_path / "devyard.toml"
    file.write_text(text)
    with pytest.raises(ConfigError, match=match):
        load_server_config(file=file)


def test_bad_environment_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="DEVYARD_RATE_LIMIT_BURST"):
        load_server_config(env={"DEVYARD_DATA_DIR": "/d", "DEVYARD_RATE_LIMIT_BURST": "lots"})


def test_passwords_never_reach_a_repr() -> None:
    url = "postgresql://devyard:hunter2@db.example/devyard"
    config = ServerConfig(data_dir=Path("/d"), database_url=url)
    assert "hunter2" not in repr(config)
    assert redact_url(url) == "postgresql://devyard:***@db.example/devyard"
    assert redact_url("postgresql://db.example/x") == "postgresql://db.example/x"


def test_the_edge_caps_come_from_the_config(tmp_path: Path) -> None:
    config = load_server_config(flags={"data_dir": str(tmp_path)})
    assert (config.max_connectors_per_tunnel, config.max_streams_per_instance) == (8, 16)
    env = {"DEVYARD_MAX_CONNECTORS_PER_TUNNEL": "3", "DEVYARD_MAX_STREAMS_PER_INSTANCE": "5"}
    config = load_server_config(flags={"data_dir": str(tmp_path)}, env=env)
    assert (config.max_connectors_per_tunnel, config.max_streams_per_instance) == (3, 5)
    for bad in ("0", "-1", "many"):
        with pytest.raises(ConfigError, match="DEVYARD_MAX_STREAMS_PER_INSTANCE"):
            load_server_config(
                flags={"data_dir": str(tmp_path)}, env={"DEVYARD_MAX_STREAMS_PER_INSTANCE": bad}
            )
    with pytest.raises(ValueError, match="max_connectors_per_tunnel"):
        ServerConfig(data_dir=tmp_path, max_connectors_per_tunnel=0)


def test_mcp_refuses_browser_origins_unless_configured(tmp_path: Path) -> None:
    assert load_server_config(flags={"data_dir": str(tmp_path)}).mcp_allowed_origins == ()
    env = {"DEVYARD_MCP_ALLOWED_ORIGINS": "https://console.example, http://127.0.0.1:3000/"}
    config = load_server_config(flags={"data_dir": str(tmp_path)}, env=env)
    assert config.mcp_allowed_origins == ("https://console.example", "http://127.0.0.1:3000")
    for bad in ("console.example", "https://console.example/path", "ftp://x"):
        with pytest.raises(ConfigError, match="DEVYARD_MCP_ALLOWED_ORIGINS"):
            load_server_config(
                flags={"data_dir": str(tmp_path)}, env={"DEVYARD_MCP_ALLOWED_ORIGINS": bad}
            )


def test_the_build_cache_bounds_come_from_the_file_and_the_environment(tmp_path: Path) -> None:
    assert load_server_config(flags={"data_dir": str(tmp_path)}).build_cache.max_bytes == 10 << 30
    file = tmp_path / "devyard.toml"
    file.write_text('data_dir = "/d"\n[build_cache]\nmax_bytes = 1048576\nmax_idle_days = 2\n')
    config = load_server_config(file=file, env={"DEVYARD_BUILD_CACHE_MAX_ENTRY": "4096"})
    cache = config.build_cache
    assert (cache.max_bytes, cache.max_entry, cache.max_idle_days) == (1 << 20, 4096, 2.0)
    with pytest.raises(ConfigError, match="DEVYARD_BUILD_CACHE_MAX_BYTES"):
        load_server_config(env={"DEVYARD_DATA_DIR": "/d", "DEVYARD_BUILD_CACHE_MAX_BYTES": "0"})
