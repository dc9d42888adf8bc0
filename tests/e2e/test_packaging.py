"""The distribution as a newcomer installs it.

`pip install devyard` is the connector; `devyard[hostd]`, `devyard[server]` and
`devyard[client]` add the host daemon, the server and the API commands; `./dev up` installs
`.[server,hostd,client]`. Each of those, alone in a clean venv, must parse every command,
start its own and import all of its modules, and the base install must not carry the web
stack. The slow tests build the wheel once, install it with each extra from PyPI (through
pip's cache) into its own venv, in parallel threads, and run the installed ``devyard``.

The cheap tests need no install: what each install's code imports at run time is what
pyproject.toml declares for it, no more and no less; and argparse setup imports no module of
the server, the host daemon or an extra's package, whatever the command.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tomllib
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import trio

from ._cli import Running

ROOT = Path(__file__).resolve().parents[2]

#: Top-level modules only an extra installs, with the extra.
EXTRA_MODULES: Mapping[str, str] = {
    "quart": "server",
    "quart_trio": "server",
    "hypercorn": "server",
    "werkzeug": "server",
    "psycopg": "server",
    "psycopg_pool": "server",
    "yaml": "server",
    "jsonschema_rs": "server",
    "PIL": "hostd",
    "httpx": "client, hostd",
}

# Every command path of the parser, `--help` parsed on each, plus real argument lists (their
# `type=` checks run); then the modules that parsing loaded.
_PARSE_PROBE = r"""
import argparse, contextlib, io, json, sys
from devyard.cli import build_parser

parser = build_parser()

def paths(p, prefix):
    yield prefix
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from paths(child, [*prefix, name])

seen = []
for path in paths(parser, []):
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            parser.parse_args([*path, "--help"])
        except SystemExit as exc:
            assert exc.code == 0, (path, exc.code)
    seen.append(" ".join(path))
for argv in json.loads(sys.argv[1]):
    parser.parse_args(argv)
print(json.dumps({"commands": seen, "modules": sorted(sys.modules)}))
"""

_REAL_ARGVS = [
    ["up", "--port", "0"],
    ["server", "--data-dir", "d", "--link-listen", "127.0.0.1:0"],
    ["admin", "bootstrap", "--data-dir", "d", "--org", "acme"],
    ["hostd", "--server", "http://h", "--token-file", "t", "--region", "r", "--link", "tcp://h:1"],
    ["connector", "run", "--server", "http://h", "--link", "tcp://h:1", "--grace", "5s"],
    ["connector", "quick", "--server", "http://h", "--selector", "db:5432"],
    ["whoami"],
    ["adb", "connect", "android_x"],
]


def test_parsing_any_command_imports_no_server_hostd_or_extra() -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-c", _PARSE_PROBE, json.dumps(_REAL_ARGVS)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    commands = set(found["commands"])
    expected = {"up", "server", "admin bootstrap", "hostd", "connector run", "connector quick"}
    assert expected | {"whoami", "adb connect"} <= commands
    modules: list[str] = found["modules"]
    assert [m for m in modules if m.startswith(("devyard.server", "devyard.up"))] == []
    assert [m for m in modules if m.startswith("devyard.hostd")] == [
        "devyard.hostd",
        "devyard.hostd.commands",
    ]
    assert sorted({m.partition(".")[0] for m in modules} & EXTRA_MODULES.keys()) == []


#: The import name of each distribution pyproject.toml declares for running (not [dev]).
IMPORT_NAMES: Mapping[str, str] = {
    "trio": "trio",
    "trio-websocket": "trio_websocket",
    "attrs": "attrs",
    "cattrs": "cattrs",
    "h11": "h11",
    "quart-trio": "quart_trio",
    "quart": "quart",
    "werkzeug": "werkzeug",
    "hypercorn": "hypercorn",
    "psycopg": "psycopg",
    "psycopg-pool": "psycopg_pool",
    "pyyaml": "yaml",
    "jsonschema-rs": "jsonschema_rs",
    "pillow": "PIL",
    "av": "av",
    "httpx": "httpx",
    "prometheus-client": "prometheus_client",
    "dnspython": "dns",
    "mcp-types": "mcp_types",
    "opentelemetry-api": "opentelemetry",
    "opentelemetry-sdk": "opentelemetry",
    "boto3": "boto3",
    "botocore": "botocore",
}

#: Where each install's code lives ("" is `pip install devyard`, the connector).
CODE_OF: Mapping[str, tuple[str, ...]] = {
    "": ("core", "connector", "cli.py", "__init__.py", "__main__.py"),
    "server": ("server",),
    "hostd": ("hostd",),
    "client": ("client",),
}


def _runtime_imports(paths: tuple[str, ...]) -> set[str]:
    """Top-level third-party modules imported at run time (not under TYPE_CHECKING)."""
    found: set[str] = set()
    files = [
        file
        for name in paths
        for file in ([ROOT / "devyard" / name] if name.endswith(".py") else [])
        or sorted((ROOT / "devyard" / name).rglob("*.py"))
    ]
    for file in files:
        tree = ast.parse(file.read_text(encoding="utf-8"))
        typing_only = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for inner in ast.walk(node)
        }
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.Import):
                found.update(alias.name.partition(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.partition(".")[0])
    return found - set(sys.stdlib_module_names) - {"devyard", "__future__"}


def _import_name(requirement: str) -> str:
    name = re.split(r"[\[<>=!~;\s]", requirement, maxsplit=1)[0].lower()
    return IMPORT_NAMES.get(name, name)  # an unknown one is reported as not imported


#: Extras of features an operator turns on, imported only then (inside the function that
#: enables them): `otel` (docs/operations.md, "Tracing").
OPTIONAL_EXTRAS: tuple[str, ...] = ("otel", "s3")  # s3: [blobs] backend = "s3"


def _optional() -> set[str]:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    return {_import_name(spec) for extra in OPTIONAL_EXTRAS for spec in extras[extra]}


def _declared() -> dict[str, set[str]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lists = {"": project["dependencies"], **project["optional-dependencies"]}
    return {
        extra: {_import_name(spec) for spec in specs if not spec.startswith("devyard")}
        for extra, specs in lists.items()
        if extra in CODE_OF
    }


def test_declared_dependencies_are_what_the_code_imports() -> None:
    declared = _declared()
    optional = _optional()
    for extra, paths in CODE_OF.items():
        imported = _runtime_imports(paths)
        undeclared = imported - declared[""] - declared[extra] - optional
        assert not undeclared, f"[{extra}] imports what it does not declare: {undeclared}"
        assert declared[extra] <= imported, f"[{extra}] declares what it does not import"


# ---- the wheel, installed with each extra in a clean venv


#: venv name -> (extras, packages whose every module must import there)
INSTALLS: Mapping[str, tuple[str, tuple[str, ...]]] = {
    "base": ("", ("devyard.cli", "devyard.core", "devyard.connector")),
    "hostd": ("hostd", ("devyard.cli", "devyard.core", "devyard.hostd")),
    "server": ("server", ("devyard.cli", "devyard.core", "devyard.server")),
    "client": ("client", ("devyard.cli", "devyard.client")),
    "up": ("server,hostd,client", ("devyard",)),  # what ./dev up installs
}

_IMPORT_PROBE = r"""
import importlib, json, pkgutil, sys
imported = []
for package in sys.argv[1:]:
    module = importlib.import_module(package)
    imported.append(package)
    for info in pkgutil.walk_packages(getattr(module, "__path__", []), package + "."):
        if info.name.endswith(".__main__"):
            continue  # it runs the CLI
        importlib.import_module(info.name)
        imported.append(info.name)
print(json.dumps({"file": importlib.import_module("devyard").__file__, "imported": imported}))
"""

_PIP_TIMEOUT_S = 400


def _env(venv: Path) -> dict[str, str]:
    """This process's environment with the venv first on PATH and nothing pointing elsewhere."""
    drop = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("DEVYARD_")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _run(
    venv: Path, argv: list[str], cwd: Path, **extra_env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        env={**_env(venv), **extra_env},
        cwd=cwd,
        check=False,
        timeout=120,
    )


def _build_wheel(work: Path) -> Path:
    """The wheel of the tracked sources, built from a copy so the checkout stays clean."""
    source = work / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(
        ROOT / "devyard", source / "devyard", ignore=shutil.ignore_patterns("__pycache__")
    )
    out = work / "wheel"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(source)],
        capture_output=True,
        text=True,
        env=_env(Path(sys.prefix)),
        cwd=work,
        check=False,
        timeout=_PIP_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr
    (wheel,) = out.glob("devyard-*.whl")
    return wheel


def _install(work: Path, name: str, extras: str, wheel: Path) -> Path:
    """A venv without pip of its own (ensurepip costs seconds): this pip installs into it."""
    venv = work / f"venv-{name}"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    requirement = f"{wheel}[{extras}]" if extras else str(wheel)
    python = str(venv / "bin" / "python")
    install = [sys.executable, "-m", "pip", "--python", python, "install", "-q", requirement]
    done = subprocess.run(
        install,
        capture_output=True,
        text=True,
        env=_env(venv),
        cwd=work,
        check=False,
        timeout=_PIP_TIMEOUT_S,
    )
    assert done.returncode == 0, f"pip install {requirement}: {done.stderr}"
    return venv


@pytest.fixture(scope="module")
def venvs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mapping[str, Path]]:
    work = tmp_path_factory.mktemp("packaging")
    wheel = _build_wheel(work)
    with ThreadPoolExecutor(max_workers=len(INSTALLS)) as pool:
        futures = {
            name: pool.submit(_install, work, name, extras, wheel)
            for name, (extras, _) in INSTALLS.items()
        }
        yield {name: future.result() for name, future in futures.items()}


@pytest.mark.slow
@pytest.mark.timeout(_PIP_TIMEOUT_S + 200)
@pytest.mark.parametrize("name", list(INSTALLS))
def test_each_install_imports_all_modules_of_its_commands(
    venvs: Mapping[str, Path], name: str, tmp_path: Path
) -> None:
    venv = venvs[name]
    done = _run(venv, ["python", "-c", _IMPORT_PROBE, *INSTALLS[name][1]], tmp_path)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert Path(found["file"]).is_relative_to(venv), "the installed devyard, not the checkout"
    assert len(found["imported"]) > len(INSTALLS[name][1])


@pytest.mark.slow
@pytest.mark.timeout(_PIP_TIMEOUT_S + 200)
def test_the_connector_alone_starts_and_carries_no_web_stack(
    venvs: Mapping[str, Path], tmp_path: Path
) -> None:
    venv = venvs["base"]
    for argv in (["--help"], ["connector", "--help"], ["connector", "run", "--help"]):
        done = _run(venv, ["devyard", *argv], tmp_path)
        assert done.returncode == 0, (argv, done.stderr)
    # past parsing: the connector's modules load, then it asks for the token
    done = _run(venv, ["devyard", "connector", "run", "--server", "http://127.0.0.1:9"], tmp_path)
    assert done.returncode == 2 and "give the tunnel token" in done.stderr, done.stderr

    probe = "import importlib.util, json, sys; print(json.dumps([m for m in sys.argv[1:] "
    probe += "if importlib.util.find_spec(m) is not None]))"
    done = _run(venv, ["python", "-c", probe, *EXTRA_MODULES], tmp_path)
    assert json.loads(done.stdout) == []
    for module in ("quart", "hypercorn"):
        done = _run(venv, ["python", "-c", f"import {module}"], tmp_path)
        assert done.returncode == 1 and "ModuleNotFoundError" in done.stderr

    # a command whose extra is missing says which extra, not a traceback
    server = _run(venv, ["devyard", "server", "--data-dir", str(tmp_path / "d")], tmp_path)
    whoami = _run(venv, ["devyard", "whoami"], tmp_path, DEVYARD_API_KEY="dy_x")
    for done, extra in ((server, "server"), (whoami, "client")):
        assert done.returncode == 1, done.stderr
        assert f"pip install 'devyard[{extra}]'" in done.stderr
        assert "Traceback" not in done.stderr


@pytest.mark.slow
@pytest.mark.timeout(_PIP_TIMEOUT_S + 200)
def test_hostd_server_and_client_installs_start_their_commands(
    venvs: Mapping[str, Path], tmp_path: Path
) -> None:
    hostd, server, client = venvs["hostd"], venvs["server"], venvs["client"]
    for venv, argv in (
        (hostd, ["hostd", "--help"]),
        (server, ["server", "--help"]),
        (server, ["admin", "bootstrap", "--help"]),
        (client, ["whoami", "--help"]),
        (client, ["adb", "connect", "--help"]),
    ):
        done = _run(venv, ["devyard", *argv], tmp_path)
        assert done.returncode == 0, (argv, done.stderr)
        assert "usage: devyard" in done.stdout

    done = _run(hostd, ["python", "-c", "import quart"], tmp_path)
    assert "ModuleNotFoundError" in done.stderr, "hostd does not drag in the web stack"
    # hostd runs past parsing: its daemon and drivers load, then the token file is read
    hostd_argv = ["--server", "http://127.0.0.1:9", "--token-file", "missing", "--region", "r"]
    done = _run(hostd, ["devyard", "hostd", *hostd_argv], tmp_path)
    assert done.returncode == 2 and "cannot read the token file" in done.stderr, done.stderr
    # the server's store and bootstrap run for real on SQLite
    data = tmp_path / "data"
    bootstrap = ["devyard", "admin", "bootstrap", "--data-dir", str(data), "--org", "acme"]
    done = _run(server, bootstrap, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "dy_" in done.stdout


@pytest.mark.slow
@pytest.mark.timeout(_PIP_TIMEOUT_S + 200)
async def test_what_dev_up_installs_runs_up_a_device_and_the_client(
    venvs: Mapping[str, Path], tmp_path: Path
) -> None:
    venv = venvs["up"]
    data = tmp_path / "data"
    process = await trio.lowlevel.open_process(
        ["devyard", "up", "--data-dir", str(data), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=_env(venv),
        cwd=tmp_path,
    )
    up = Running(process)
    try:
        with trio.fail_after(90):
            url = (await up.read_until(r"serving at (http://127\.0\.0\.1:\d+)")).group(1)
            key = (data / "admin-api-key").read_text().strip()
            async with httpx.AsyncClient(
                base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60
            ) as http:
                while True:  # until up's host daemon has registered, there is no capacity
                    created = await http.post(
                        "/v1/android_instances", params={"wait": "true"}, json={}
                    )
                    if created.status_code != 409:
                        break
                    assert created.json()["reason"] == "no_capacity", created.text
                    await trio.sleep(0.1)
                assert created.status_code == 200, created.text
                status = created.json()["status"]
                shot = await http.get(  # the virtual device draws it with pillow
                    f"{status['apiUrl']}/screenshot",
                    headers={"Authorization": f"Bearer {status['token']}"},
                )
                assert (shot.status_code, shot.content[:8]) == (200, b"\x89PNG\r\n\x1a\n")
            key_file = str(data / "admin-api-key")
            whoami = await trio.run_process(
                ["devyard", "whoami", "--server", url, "--api-key-file", key_file],
                capture_stdout=True,
                capture_stderr=True,
                env=_env(venv),
                cwd=tmp_path,
                check=False,
            )
            assert whoami.returncode == 0, whoami.stderr
            assert b"default" in whoami.stdout
            assert await up.stop(signal.SIGTERM) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
