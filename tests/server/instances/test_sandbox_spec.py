"""``spec.sandbox.playwrightAndroid`` and Chrome flag entries over HTTP (docs/sandbox.md): taken
on Android, refused elsewhere and for flags that would break the sandbox, and
``status.sandbox.playwrightAndroid.url`` only once ready and only when enabled."""

from __future__ import annotations

import pytest
from quart.typing import TestClientProtocol as Client

from devyard.core.chrome_flags import ChromeFlagError, ChromeFlagProblem, parse_chrome_flag
from devyard.server.hosts import InstanceEvent, InstancePhase
from devyard.server.instances import InstanceService
from tests.server.api.conftest import Callers, assert_api_error

from .test_api import _create, app, callers, client, config, manual_clock, registry, service

__all__ = ["app", "callers", "client", "config", "manual_clock", "registry", "service"]

_ENABLED = {"playwrightAndroid": {"enabled": True, "version": "1.56.1-lim.1"}}


def _flag(text: str) -> dict[str, object]:
    return {"kind": "Configuration", "configuration": {"kind": "ChromeFlag", "chromeFlag": text}}


async def test_the_cdp_url_appears_when_ready_and_enabled(
    client: Client, callers: Callers, service: InstanceService
) -> None:
    flags = [_flag("enable-command-line-on-non-rooted-devices@1"), _flag("--lang=de")]
    created = await _create(client, callers, spec={"sandbox": _ENABLED, "initialAssets": flags})
    iid = created["metadata"]["id"]
    assert "sandbox" not in created["status"], "no URL while creating"
    assert created["spec"]["sandbox"] == _ENABLED
    plain = (await _create(client, callers))["metadata"]["id"]
    off = await _create(
        client, callers, spec={"sandbox": {"playwrightAndroid": {"enabled": False}}}
    )
    for instance_id in (iid, plain, off["metadata"]["id"]):
        await service.on_instance_event("h1", InstanceEvent(instance_id, InstancePhase.READY))
    got = await (
        await client.get(f"/v1/android_instances/{iid}", headers=callers.member.headers)
    ).get_json()
    url = got["status"]["sandbox"]["playwrightAndroid"]["url"]
    assert url.startswith("ws") and url.endswith(f"/v1/instances/{iid}/cdp")
    for other in (plain, off["metadata"]["id"]):
        seen = await (
            await client.get(f"/v1/android_instances/{other}", headers=callers.member.headers)
        ).get_json()
        assert "sandbox" not in seen["status"]


async def test_refusals_name_the_field(client: Client, callers: Callers) -> None:
    h = callers.member.headers
    for path, spec, status, field in [
        ("ios", {"sandbox": _ENABLED}, 422, "playwrightAndroid"),
        ("ios", {"initialAssets": [_flag("--lang=de")]}, 422, "Configuration"),
        ("android", {"initialAssets": [_flag("--proxy-server=http://x:1")]}, 422, "--proxy-server"),
        ("android", {"initialAssets": [_flag("--no-sandbox")]}, 422, "--no-sandbox"),
        ("android", {"initialAssets": [_flag("not a flag")]}, 422, "not a flag"),
        ("android", {"sandbox": {"xcode": {"enabled": True}}}, 422, "xcode"),  # iOS only
        ("android", {"sandbox": {"playwrightAndroid": {"enabled": "yes"}}}, 400, "enabled"),
        ("android", {"initialAssets": [{"kind": "Configuration"}]}, 400, "initialAssets"),
    ]:
        response = await client.post(f"/v1/{path}_instances", json={"spec": spec}, headers=h)
        await assert_api_error(response, status, field)


@pytest.mark.parametrize(
    ("text", "argument"),
    [("--lang=de", "--lang=de"), ("--force-dark-mode", "--force-dark-mode"),
     ("--user-agent=a b/1", "--user-agent=a b/1"), ("some-flag@2", None)],
)  # fmt: skip
def test_flags_taken(text: str, argument: str | None) -> None:
    flag = parse_chrome_flag(text)
    assert flag.argument == argument
    assert (flag.lab is None) == (argument is not None)


@pytest.mark.parametrize(
    ("text", "problem"),
    [("--remote-debugging-address=0.0.0.0", ChromeFlagProblem.REFUSED),
     ("--remote-debugging-port=9222", ChromeFlagProblem.REFUSED),
     ("--proxy-pac-url=data:x", ChromeFlagProblem.REFUSED),
     ("--user-data-dir=/", ChromeFlagProblem.REFUSED),
     ("--disable-setuid-sandbox", ChromeFlagProblem.REFUSED),
     ("--js-flags=--expose-gc", ChromeFlagProblem.REFUSED),
     ("--renderer-cmd-prefix=gdb", ChromeFlagProblem.REFUSED),
     ("-lang", ChromeFlagProblem.MALFORMED), ("--a\nb", ChromeFlagProblem.MALFORMED),
     ("--lang\n", ChromeFlagProblem.MALFORMED), ("flag@x", ChromeFlagProblem.MALFORMED)],
)  # fmt: skip
def test_flags_refused(text: str, problem: ChromeFlagProblem) -> None:
    with pytest.raises(ChromeFlagError) as refused:
        parse_chrome_flag(text)
    assert refused.value.problem is problem
