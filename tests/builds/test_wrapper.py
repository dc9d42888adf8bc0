"""Which Gradle a ``gradlebuild`` runs: the project's ``gradlew`` once its distribution is in
the organization's Gradle home (Gradle's own cache layout), Debian's ``gradle`` otherwise; and
the Android SDK location passed through. A `BuildHost` in this process, real sandbox."""

from __future__ import annotations

import shutil
from pathlib import Path

import attrs
import pytest
import trio

from devyard.hostd.builds import BuildHost
from devyard.hostd.builds.gradlew import distribution_hash
from devyard.hostd.drivers.base import DeviceSpec, Platform
from devyard.hostd.drivers.gradle import GradleConfig

URL = "https://services.gradle.org/distributions/gradle-8.5-bin.zip"


def test_distribution_hash_is_gradles() -> None:
    # the directory names Gradle's wrapper makes under ~/.gradle/wrapper/dists/
    assert distribution_hash(URL) == "5t9huq95ubn472n8rpzujfbqh"
    assert distribution_hash(URL.replace("8.5", "7.6")) == "9l9tetv7ltxvx3i8an4pb86ye"


async def test_the_wrapper_runs_only_with_a_cached_distribution(tmp_path: Path) -> None:
    if shutil.which("bwrap") is None:
        pytest.skip("needs bubblewrap (scripts/deps)")
    spec = DeviceSpec(Platform.GRADLE, "inst-1", tmp_path / "instances" / "inst-1")
    config = GradleConfig(android_sdk_root="/usr/lib/android-sdk").build_config(spec)
    config = attrs.evolve(config, gradle="/bin/echo")  # "Debian's gradle" says what it got
    async with trio.open_nursery() as nursery:
        host = BuildHost(tmp_path / "build", config, nursery)
        await trio.to_thread.run_sync(host.create)
        root = host.workspace.root
        (root / "gradlew").write_text('echo "wrapper ran $*"; echo "sdk=$ANDROID_SDK_ROOT"\n')
        (root / "gradle/wrapper").mkdir(parents=True)
        (root / "gradle/wrapper/gradle-wrapper.properties").write_text(
            "distributionBase=GRADLE_USER_HOME\ndistributionPath=wrapper/dists\n"
            f"distributionUrl={URL.replace(':', chr(92) + ':')}\n"
        )

        async def build(**extra: object) -> list[str]:
            run = host.start({"command": "gradlebuild", "tasks": ["assemble"], **extra})
            with trio.fail_after(60):
                await run.done.wait()
            return [e.data for e in run.events if e.type in ("command", "stdout")]

        # not cached: Debian's gradle (here /bin/echo), with the SDK location
        debian = await build()
        assert debian[0].startswith("gradle ") and "assemble" in debian[1], debian
        marker = config.gradle_home / "wrapper/dists/gradle-8.5-bin" / distribution_hash(URL)
        marker.mkdir(parents=True)
        (marker / "gradle-8.5-bin.zip.ok").touch()
        wrapped = await build()
        assert wrapped[0].startswith("./gradlew "), wrapped
        assert wrapped[1].startswith("wrapper ran --daemon") and "assemble" in wrapped[1]
        assert wrapped[2] == "sdk=/usr/lib/android-sdk"
        assert (await build(useWrapper=False))[0].startswith("gradle ")
        own_sdk = await build(env={"ANDROID_SDK_ROOT": "/opt/sdk"})
        assert own_sdk[2] == "sdk=/opt/sdk", "the request's own location wins"

        # a wrapper properties file that is a link is never followed
        props = root / "gradle/wrapper/gradle-wrapper.properties"
        props.rename(root / "props")
        props.symlink_to("../../props")
        assert (await build())[0].startswith("gradle ")
        nursery.cancel_scope.cancel()
