"""PNGs of every console page at desktop and phone width, for review (`scripts/console-screenshots
OUT_DIR`): the browser tests' site (a real server, a virtual host and, where the tools are
installed, a gradle host), some objects in it, Debian's Chromium."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx
import trio

from tests.browser import BrowserThread
from tests.console.browser import (
    BUILD_REGION,
    STEP_S,
    ConsolePage,
    Site,
    SiteThread,
    console_page,
    sign_in_with_key,
)
from tests.server.accounts.oidc_provider import running_provider

WIDTHS = {"desktop": (1280, 900, False), "phone": (390, 844, True)}


async def _objects(site: Site) -> dict[str, Any]:
    """An Android instance (ready, labelled), another one creating, a gradle build with an
    ended and a running exec when a gradle host serves."""
    headers = site.headers(site.alice_key)
    made: dict[str, Any] = {}
    async with httpx.AsyncClient(base_url=site.url, headers=headers, timeout=60) as api:
        android = await api.post(
            "/v1/android_instances",
            params={"wait": "true"},
            json={
                "metadata": {"displayName": "checkout-flow", "labels": {"team": "web", "pr": "42"}},
                "spec": {"inactivityTimeout": "10m"},
            },
        )
        made["android"] = android.json()
        await api.post(
            "/v1/android_instances",
            json={"metadata": {"labels": {"team": "mobile"}}, "spec": {}},
        )
        if site.builds:
            gradle = await api.post(
                "/v1/gradle_instances",
                params={"wait": "true"},
                json={"metadata": {"displayName": "nightly"}, "spec": {"region": BUILD_REGION}},
            )
            build = gradle.json()
            made["gradle"] = build
            device = {"Authorization": f"Bearer {build['status']['token']}"}
            first = await api.post(
                build["status"]["apiUrl"] + "/exec",
                json={"command": "run", "commandLine": "echo compiling; echo done"},
                headers=device,
            )
            exec_id = first.json()["execId"]
            with trio.fail_after(STEP_S):
                while True:
                    logs = await api.get(f"/v1/gradle_instances/{build['id']}/build_logs")
                    if any(r["id"] == exec_id for r in logs.json()):
                        break
                    await trio.sleep(0.1)
            made["exec"] = exec_id
            await api.post(
                build["status"]["apiUrl"] + "/exec",
                json={"command": "run", "commandLine": "for i in 1 2 3; do echo step $i; done;"
                      " sleep 600"},
                headers=device,
            )  # fmt: skip
    return made


async def _shoot(console: ConsolePage, url: str, path: Path, wait: str | None = None) -> None:
    await console.goto(url)
    if wait is not None:
        with trio.move_on_after(STEP_S):
            await console.wait(wait)
    await console.call(console.page.screenshot, path=str(path), full_page=True)
    print(path, flush=True)


async def shoot_all(site: Site, chromium: BrowserThread, out: Path) -> None:
    made = await _objects(site)
    android = made["android"]["id"]
    for label, (width, height, mobile) in WIDTHS.items():
        async with console_page(chromium, width=width, height=height, mobile=mobile) as console:
            await _shoot(console, f"{site.url}/console/sign-in", out / f"sign-in-{label}.png")
            await sign_in_with_key(console, site, site.alice_key)
            pages: list[tuple[str, str, str | None]] = [
                ("instances", "/console/instances/", None),
                ("instances-filtered", "/console/instances/?labelSelector=team%3Dweb", None),
                ("instance-new", "/console/instances/new?platform=android", None),
                (
                    "instance",
                    f"/console/instances/{android}",
                    "() => { const f = document.getElementById('device-view');"
                    " const d = f && f.contentWindow.devyard; return d && d.decoded > 1; }",
                ),
                ("organizations", "/console/organizations", None),
                ("builds", "/console/builds/", None),
                ("tunnels", "/console/tunnels/", None),
                ("assets", "/console/assets/", None),
                ("usage", "/console/usage/", None),
                ("team", "/console/team/", None),
                ("team-audit", "/console/team/audit", None),
                ("billing", "/console/billing/", None),
                ("operators", "/console/operators/", None),
                ("not-found", "/console/instances/android_local_nothing", None),
            ]
            if "gradle" in made:
                gradle = made["gradle"]["id"]
                pages += [
                    (
                        "build",
                        f"/console/builds/{gradle}",
                        "() => document.body.textContent.includes('step 3')",
                    ),
                    ("build-log", f"/console/builds/{gradle}/logs/{made['exec']}", None),
                ]
            for name, path, wait in pages:
                await _shoot(console, site.url + path, out / f"{name}-{label}.png", wait)


def main(argv: list[str]) -> int:
    out = Path(argv[1] if len(argv) > 1 else "console-screenshots").resolve()
    out.mkdir(parents=True, exist_ok=True)
    os.environ["AUTHLIB_INSECURE_TRANSPORT"] = "1"  # the test provider, on loopback
    with tempfile.TemporaryDirectory(prefix="console-shots-") as tmp:
        provider_gen = running_provider("(set once the server is bound)")  # a generator
        provider = next(provider_gen)
        thread = SiteThread(Path(tmp), provider)
        chromium = BrowserThread()
        try:
            assert thread.site is not None
            trio.run(shoot_all, thread.site, chromium, out)
        finally:
            chromium.close()
            thread.close()
            next(provider_gen, None)  # past its yield: the provider stops
    print(f"screenshots in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
