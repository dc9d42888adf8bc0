"""The pure rules of the build data plane: manifest paths and links, the ignore rules, exec
plans and the sandbox's command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from devyard.hostd.builds.commands import plan_exec
from devyard.hostd.builds.errors import BuildError, BuildReason
from devyard.hostd.builds.paths import GitIgnore, always_ignored, check_link, check_path
from devyard.hostd.builds.sandbox import SandboxConfig, sandbox_argv
from devyard.hostd.builds.sync import parse_meta

SHA = "ab" * 32


@pytest.mark.parametrize(
    "path", ["../x", "/etc/passwd", "a/../../x", "a//b", "a/./b", "a\\b", "", "a\x00b", "x/"]
)
def test_bad_paths_are_refused(path: str) -> None:
    with pytest.raises(BuildError) as refused:
        check_path(path)
    assert refused.value.reason is BuildReason.BAD_REQUEST


def test_links_stay_inside_the_root() -> None:
    assert check_link("a/b/link", "../c") == "../c"
    for target in ("../../c", "/etc", "..", "a\\b"):
        with pytest.raises(BuildError):
            check_link("a/link", target)


def test_the_fixed_ignores() -> None:
    assert always_ignored("build/x.class") and always_ignored("app/build/libs/a.jar")
    assert always_ignored(".gradle/caches/x") and always_ignored("app/local.properties")
    assert not always_ignored("src/main/java/com/x/build/Tool.java")
    assert not always_ignored("app/src/main/Build.java")


def test_gitignore_patterns() -> None:
    ignore = GitIgnore.parse("# c\n*.log\n/out/\ndocs/**/*.tmp\n!keep.log\n")
    assert ignore.ignores("a.log") and ignore.ignores("x/y/b.log")
    assert not ignore.ignores("keep.log")
    assert ignore.ignores("out/x") and not ignore.ignores("src/out")
    assert ignore.ignores("docs/a/b/c.tmp") and not ignore.ignores("src/c.tmp")


def test_manifest_checks() -> None:
    def meta(files: list[object], payloads: list[object]) -> bytes:
        return json.dumps({"files": files, "payloads": payloads}).encode()

    ok = {"path": "a.txt", "size": 1, "sha256": SHA}
    files, payloads = parse_meta(
        meta([ok], [{"kind": "full", "path": "a.txt", "targetSha256": SHA, "length": 1}])
    )
    assert [f.path for f in files] == ["a.txt"] and payloads[0].length == 1
    for bad in (
        meta([ok, ok], []),  # twice
        meta([ok, {**ok, "path": "a.txt/b"}], []),  # under a file
        meta([ok], [{"kind": "full", "path": "b.txt", "targetSha256": SHA, "length": 1}]),
        meta([ok], [{"kind": "full", "path": "a.txt", "targetSha256": "cd" * 32, "length": 1}]),
        meta([ok], [{"kind": "delta", "path": "a.txt", "targetSha256": SHA, "length": 1}]),
        meta([{**ok, "size": -1}], []),
        meta([{**ok, "sha256": "nothex"}], []),
        b"[]",
        b"{",
    ):
        with pytest.raises(BuildError):
            parse_meta(bad)


def test_exec_plans() -> None:
    plan = plan_exec({"command": "gradlebuild", "tasks": [":app:jar"], "args": ["--offline"]})
    assert plan.argv[:4] == ("gradle", "--no-daemon", "--console=plain", "--build-cache")
    assert plan.argv[4:] == (":app:jar", "--offline")
    assert plan.cwd == "/workspace" and plan.env["GRADLE_USER_HOME"] == "/gradle-home"
    run = plan_exec({"command": "run", "commandLine": "make", "cwd": "sub", "env": ["A=1"]})
    assert run.argv == ("/bin/sh", "-c", "make") and run.cwd == "/workspace/sub"
    assert run.env["A"] == "1"
    for bad in (
        {"command": "gradlebuild", "tasks": ["--init-script=/x"]},
        {"command": "run", "commandLine": ""},
        {"command": "run", "commandLine": "x", "cwd": "../up"},
        {"command": "run", "commandLine": "x", "env": {"1BAD": "x"}},
        {"command": "run", "commandLine": "x", "network": "open"},
        {"command": "run", "commandLine": "x", "timeoutSeconds": 0},
        {"command": "run", "commandLine": "x", "artifacts": ["../*.jar"]},
        {"command": "rm"},
    ):
        with pytest.raises(BuildError) as refused:
            plan_exec(bad)
        assert refused.value.reason is BuildReason.BAD_REQUEST, bad
    with pytest.raises(BuildError) as xcode:
        plan_exec({"command": "xcodebuild"})
    assert xcode.value.reason is BuildReason.UNSUPPORTED


def test_the_sandbox_command_line() -> None:
    config = SandboxConfig(build_uid=65534, usr_links=("bin",))
    argv = sandbox_argv(
        config, ["gradle", "build"], workspace=Path("/w"), gradle_home=Path("/g"), info_fd=5
    )
    argv = argv[argv.index("bwrap") :]  # after the keeper (sandbox_keeper.py)
    assert "--unshare-net" in argv and "--unshare-pid" in argv
    assert argv[argv.index("--info-fd") + 1] == "5"
    assert argv[argv.index("--bind") + 1 : argv.index("--bind") + 3] == ["/w", "/workspace"]
    assert "--die-with-parent" in argv  # its parent is the keeper, not a trio worker thread
    tail = argv[argv.index("setpriv") :]
    assert "--reuid=65534" in tail and tail[-2:] == ["gradle", "build"]
    assert "setpriv" not in sandbox_argv(
        SandboxConfig(), ["true"], workspace=Path("/w"), gradle_home=Path("/g")
    )
