"""Signed artifact URLs (devyard/server/artifact_urls.py): one path of one instance, until
their expiry, keyed by the instance token; the gateway's use of them is tested with a real
Gradle build (tests/builds/test_gradle_build.py)."""

from __future__ import annotations

from urllib.parse import parse_qsl, unquote, urlsplit

from devyard.server.artifact_urls import artifact_url, is_artifact_path, verify

_API = "https://devyard.example/v1/instances/gradle_local_01J/api"
_TOKEN, _ID = "dyi_secret", "gradle_local_01J"


def _parts(url: str) -> tuple[str, dict[str, str]]:
    split = urlsplit(url)
    rest = unquote(split.path.removeprefix(urlsplit(_API).path + "/"))
    return rest, dict(parse_qsl(split.query))


def test_a_signed_url_opens_its_path_until_it_expires() -> None:
    url = artifact_url(_API, _TOKEN, _ID, "build-1", "app/build/libs/a b.jar", now=1000, ttl=60)
    rest, query = _parts(url)
    assert rest == "exec/build-1/artifacts/app/build/libs/a b.jar"
    assert "%20" in url and _TOKEN not in url
    assert verify(_TOKEN, _ID, rest, query, now=1059)
    assert not verify(_TOKEN, _ID, rest, query, now=1061), "expired"
    assert not verify("dyi_other", _ID, rest, query, now=1000), "another instance token"
    assert not verify(_TOKEN, "gradle_local_02J", rest, query, now=1000), "another instance"
    assert not verify(_TOKEN, _ID, rest.replace("a b", "c"), query, now=1000), "another path"
    later = {**query, "expires": str(int(query["expires"]) + 3600)}
    assert not verify(_TOKEN, _ID, rest, later, now=1000), "the expiry is signed"
    assert not verify(_TOKEN, _ID, rest, {"expires": query["expires"]}, now=1000)
    assert not verify(_TOKEN, _ID, rest, {**query, "expires": "soon"}, now=1000)


def test_only_artifact_paths_can_be_signed() -> None:
    assert is_artifact_path("exec/build-1/artifacts/app/x.jar")
    for rest in ("exec/build-1/log", "sync", "exec/build-1/artifacts/../../sync", "apps"):
        assert not is_artifact_path(rest), rest
    url = artifact_url(_API, _TOKEN, _ID, "build-1", "../../sync", now=0)
    rest, query = _parts(url)
    assert not verify(_TOKEN, _ID, rest, query, now=0)
