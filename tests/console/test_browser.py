"""The console in Debian's Chromium against a real server and host daemon (one per module):
sign in with an API key and by single sign-on, create an Android instance from the form,
watch its live screen on the instance page and tap it (the device sees the touch), delete a
selection; another organization's admin sees none of it; no CSP violation anywhere; every
page under the 100 KB JS+CSS budget; a form post without the CSRF token is refused."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
import trio

from tests.browser import NEEDS_CHROMIUM, BrowserThread
from tests.polling import eventually, until
from tests.ports import free_port
from tests.server.accounts.conftest import Mailbox, SmtpPeer, smtp_accounts
from tests.server.accounts.oidc_provider import Provider

from .browser import (
    BUDGET_BYTES,
    BUILD_REGION,
    BUILD_TOOLS,
    STEP_S,
    ConsolePage,
    Site,
    SiteThread,
    chromium,
    console_page,
    sign_in_with_key,
)

pytestmark = [*NEEDS_CHROMIUM, pytest.mark.slow]

__all__ = ["chromium"]  # the module's fixture, imported


@pytest.fixture(scope="module")
def smtp() -> Iterator[SmtpPeer]:
    """A real SMTP server (aiosmtpd) the site mails its invitations to."""
    from aiosmtpd.controller import Controller  # noqa: PLC0415 - dev dependency

    mailbox = Mailbox()
    port = free_port()
    controller = Controller(mailbox, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield SmtpPeer(port=port, mailbox=mailbox)
    finally:
        controller.stop()


@pytest.fixture(scope="module")
def site(
    tmp_path_factory: pytest.TempPathFactory, provider: Provider, smtp: SmtpPeer
) -> Iterator[Site]:
    accounts = smtp_accounts(smtp)
    thread = SiteThread(tmp_path_factory.mktemp("console-site"), provider, accounts)
    try:
        assert thread.site is not None
        yield thread.site
    finally:
        thread.close()


async def _within_budget(console: ConsolePage) -> None:
    used = await console.static_bytes()
    assert 0 < used < BUDGET_BYTES, used


async def _device_touches(client: httpx.AsyncClient, instance: dict[str, object]) -> list[str]:
    status = instance["status"]
    assert isinstance(status, dict)
    response = await client.get(
        status["apiUrl"] + "/logs", headers={"Authorization": f"Bearer {status['token']}"}
    )
    assert response.status_code == 200, response.text
    return [
        item["message"]
        for item in response.json()["items"]
        if item["tag"] == "Input" and item["message"].startswith("touch down")
    ]


async def test_create_watch_tap_and_delete_an_android_instance(
    site: Site, chromium: BrowserThread
) -> None:
    async with console_page(chromium) as console, httpx.AsyncClient(base_url=site.url) as api:
        page = console.page
        with trio.fail_after(STEP_S):
            await sign_in_with_key(console, site, site.alice_key)
            await _within_budget(console)
            assert "alice" in await console.text("header")
            # the key is not in the page nor anywhere the page can read
            assert site.alice_key not in await console.call(page.content)
            await console.call(page.click, "text=Create instance")
            await console.call(
                page.wait_for_url, f"{site.url}/console/instances/new?platform=android"
            )
            await _within_budget(console)
            await console.call(page.fill, "#displayName", "checkout-flow")
            await console.call(page.fill, "#labels", "team=web\npr=42")
            await console.call(page.fill, "#inactivityTimeout", "10m")
            await console.call(
                page.click, "form[action='/console/instances/new'] button[type=submit]"
            )
            await console.call(page.wait_for_url, f"{site.url}/console/instances/android_*")
        instance_id = page.url.rsplit("/", 1)[1]
        with trio.fail_after(STEP_S * 2):
            # the page reloads itself once the instance is ready; then the live view plays
            await console.call(page.wait_for_selector, "#device-view", timeout=STEP_S * 2000)
            assert await console.text("#instance-state") == "ready"
            frame = page.frame_locator("#device-view")
            view = next(f for f in page.frames if "/watch?token=" in f.url)
            await console.call(
                view.wait_for_function, "() => window.devyard && window.devyard.decoded > 0",
                timeout=STEP_S * 1000, polling=50,
            )  # fmt: skip
        got = await api.get(
            f"/v1/android_instances/{instance_id}", headers=site.headers(site.alice_key)
        )
        instance = got.json()
        assert instance["metadata"]["labels"] == {"team": "web", "pr": "42"}
        assert instance["spec"]["inactivityTimeout"] == "10m"
        with trio.fail_after(STEP_S):
            assert await _device_touches(api, instance) == []
            box = await console.call(frame.locator("#screen").bounding_box)
            assert box is not None
            await console.call(
                page.mouse.click, box["x"] + box["width"] / 2, box["y"] + box["height"] / 3
            )

            async def touched() -> bool:
                return len(await _device_touches(api, instance)) == 1

            await until(touched)
            # its URLs, each with a copy button, and the view-only share link
            urls = await console.text("dl.urls")
            assert instance["status"]["apiUrl"] in urls
            share = await console.text("#share-url")
            assert "/watch?token=dyv_" in share
            assert await console.call(page.locator("button[data-copy]").count) >= 3
            await _within_budget(console)
        with trio.fail_after(STEP_S):
            # the share link opens the viewer, which may watch but not touch
            shared = await api.get(share)
            assert shared.status_code == 200 and "text/html" in shared.headers["content-type"]
            # the table lists it, filtered by its labels; selecting it and deleting ends it
            await console.goto(f"{site.url}/console/instances/?labelSelector=pr%3D42")
            row = page.locator(f"tr[data-id='{instance_id}']")
            assert "checkout-flow" in (await console.call(row.text_content) or "")
            assert "team=web" in (await console.call(row.text_content) or "")
            await console.call(row.locator("input[type=checkbox]").check)
            await console.call(page.click, "text=Delete selected")
            await console.call(page.wait_for_url, f"{site.url}/console/instances/?platform=android")
            after = await api.get(
                f"/v1/android_instances/{instance_id}", headers=site.headers(site.alice_key)
            )
            assert after.json()["status"]["state"] == "terminated"
        assert console.csp_errors == []


async def test_single_sign_on_lands_in_the_console(site: Site, chromium: BrowserThread) -> None:
    site.provider.reset()
    async with console_page(chromium) as console:
        page = console.page
        with trio.fail_after(STEP_S):
            await console.goto(f"{site.url}/console/sign-in")
            await console.call(page.fill, "#organization", site.acme_id)
            await console.call(page.click, "form[action='/console/sso'] button")
            await console.call(page.wait_for_url, f"{site.url}/console/instances/")
            header = await console.text("header")
            assert "dana" in header and "acme" in header and "member" in header
            await _within_budget(console)
            # sign out ends the session
            await console.call(page.click, "text=Sign out")
            await console.call(page.wait_for_url, f"{site.url}/console/sign-in")
            await console.goto(f"{site.url}/console/instances/")
            assert page.url.startswith(f"{site.url}/console/sign-in")
        assert console.csp_errors == []


async def test_another_organization_sees_none_of_it(site: Site, chromium: BrowserThread) -> None:
    async with httpx.AsyncClient(base_url=site.url) as api:
        made = await api.post(
            "/v1/android_instances",
            json={"metadata": {"displayName": "acme-secret"}, "spec": {}},
            headers=site.headers(site.alice_key),
        )
        assert made.status_code in (200, 201), made.text
        instance_id = made.json()["id"]
    async with console_page(chromium) as console:
        page = console.page
        with trio.fail_after(STEP_S):
            await sign_in_with_key(console, site, site.olga_key)
            assert "globex" in await console.text("header")
            assert "acme-secret" not in await console.call(page.content)
            for path in (
                f"/console/instances/{instance_id}",
                f"/console/instances/{instance_id}/state",
                f"/console/builds/{instance_id}",
            ):
                response = await console.goto(site.url + path)
                assert response.status == 404, path
                assert "acme-secret" not in await console.call(page.content), path
            # deleting it through the console is refused by the API as "not found"
            csrf = next(
                c["value"]
                for c in await console.call(page.context.cookies)
                if c["name"] == "devyard_csrf"
            )
            status = await console.call(
                page.evaluate,
                """async ([id, csrf]) => {
                     const body = new URLSearchParams({csrf, id, platform: 'android'});
                     const url = '/console/instances/delete';
                     return (await fetch(url, {method: 'POST', body})).status;
                   }""",
                [instance_id, csrf],
            )
            assert status == 409
            # a form post without the session's CSRF token is refused before anything
            status = await console.call(
                page.evaluate,
                """async (id) => {
                     const body = new URLSearchParams({id, platform: 'android'});
                     const url = '/console/instances/delete';
                     return (await fetch(url, {method: 'POST', body})).status;
                   }""",
                instance_id,
            )
            assert status == 403
        assert console.csp_errors == []
    async with httpx.AsyncClient(base_url=site.url) as api:
        still = await api.get(
            f"/v1/android_instances/{instance_id}", headers=site.headers(site.alice_key)
        )
        assert still.json()["status"]["state"] != "terminated"
        await api.delete(
            f"/v1/android_instances/{instance_id}", headers=site.headers(site.alice_key)
        )


async def test_a_build_exec_streams_its_log_live_then_lists_it_ended(
    site: Site, chromium: BrowserThread
) -> None:
    if not site.builds:
        pytest.skip(f"scripts/deps installs what the gradle driver needs: {BUILD_TOOLS}")
    async with httpx.AsyncClient(base_url=site.url, timeout=60) as api:
        with trio.fail_after(STEP_S * 2):
            made = await api.post(
                "/v1/gradle_instances",
                params={"wait": "true"},
                json={"metadata": {"displayName": "nightly"}, "spec": {"region": BUILD_REGION}},
                headers=site.headers(site.alice_key),
            )
            assert made.status_code == 200, made.text
        instance = made.json()
        status = instance["status"]
        device = {"Authorization": f"Bearer {status['token']}"}
        async with console_page(chromium) as console:
            with trio.fail_after(STEP_S):
                await sign_in_with_key(console, site, site.alice_key)
                await console.goto(f"{site.url}/console/builds/")
                assert "nightly" in await console.text("main")
                await console.goto(f"{site.url}/console/builds/{instance['id']}")
                await console.wait("() => document.getElementById('live-status') !== null")
                # an exec that prints, then waits (the page follows it while it runs)
                gate = "/tmp/console-go"  # never made: the exec waits until cancelled
                started = await api.post(
                    status["apiUrl"] + "/exec",
                    json={
                        "command": "run",
                        "commandLine": f"echo first-line; while [ ! -e {gate} ]; do sleep 0.05;"
                        " done; echo second-line",
                    },
                    headers=device,
                )
                assert started.status_code == 200, started.text
                exec_id = started.json()["execId"]
                await console.wait(
                    "id => (document.getElementById('exec-' + id) || {}).textContent"
                    " && document.getElementById('exec-' + id).textContent.includes('first-line')",
                    exec_id,
                )
                # (the command line is shown too: it names the second line once)
                assert (await console.text(f"#exec-{exec_id}")).count("second-line") == 1
                finish = await api.post(
                    status["apiUrl"] + "/exec",
                    json={"command": "run", "commandLine": "true"},
                    headers=device,
                )
                assert finish.status_code == 409  # one exec at a time: it is still running
            with trio.fail_after(STEP_S):
                # end it (cancelled), and the page shows the end
                cancel = await api.post(
                    status["apiUrl"] + f"/exec/{exec_id}/cancel", headers=device
                )
                assert cancel.status_code == 200, cancel.text
                await console.wait(
                    "id => document.getElementById('exec-' + id).textContent.includes('exit code')",
                    exec_id,
                )
                await _within_budget(console)

                async def reported() -> bool:
                    logs = await api.get(
                        f"/v1/gradle_instances/{instance['id']}/build_logs",
                        headers=site.headers(site.alice_key),
                    )
                    return any(r["id"] == exec_id for r in logs.json())

                await until(reported)
                await console.goto(f"{site.url}/console/builds/{instance['id']}")
                assert exec_id in await console.text("main")
                await console.goto(f"{site.url}/console/builds/{instance['id']}/logs/{exec_id}")
                assert "first-line" in await console.text("pre.log")
            assert console.csp_errors == []
        await api.delete(
            f"/v1/gradle_instances/{instance['id']}", headers=site.headers(site.alice_key)
        )


async def test_at_phone_width_a_touch_on_the_live_view_reaches_the_device(
    site: Site, chromium: BrowserThread
) -> None:
    async with httpx.AsyncClient(base_url=site.url, timeout=60) as api:
        with trio.fail_after(STEP_S):
            made = await api.post(
                "/v1/android_instances",
                params={"wait": "true"},
                json={"spec": {}},
                headers=site.headers(site.alice_key),
            )
            assert made.status_code == 200, made.text
        instance = made.json()
        async with console_page(chromium, width=390, height=844, mobile=True) as console:
            page = console.page
            with trio.fail_after(STEP_S):
                await sign_in_with_key(console, site, site.alice_key)
                await console.goto(f"{site.url}/console/instances/{instance['id']}")
                await _within_budget(console)
                # nothing wider than the phone: no sideways scrolling
                wide = await console.call(
                    page.evaluate, "() => document.documentElement.scrollWidth"
                )
                culprits = await console.call(
                    page.evaluate,
                    "() => [...document.querySelectorAll('body *')]"
                    ".filter(e => e.getBoundingClientRect().right > 391)"
                    ".map(e => e.tagName + '.' + e.className + '#' + e.id).slice(0, 8)",
                )
                assert wide <= 390, (wide, culprits)
                view = next(f for f in page.frames if "/watch?token=" in f.url)
                await console.call(
                    view.wait_for_function, "() => window.devyard && window.devyard.decoded > 0",
                    timeout=STEP_S * 1000, polling=50,
                )  # fmt: skip
                box = await console.call(
                    page.frame_locator("#device-view").locator("#screen").bounding_box
                )
                assert box is not None
                await console.call(
                    page.touchscreen.tap, box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
                )

                async def touched() -> bool:
                    return len(await _device_touches(api, instance)) == 1

                await until(touched)
                # the page's device log (the device API's /logs, polled) shows the touch too
                await console.wait(
                    "() => document.getElementById('device-log').textContent.includes('touch down')"
                )
            assert console.csp_errors == []
        await api.delete(
            f"/v1/android_instances/{instance['id']}", headers=site.headers(site.alice_key)
        )


async def test_operators_see_the_linked_hosts_and_answer_support(
    site: Site, chromium: BrowserThread
) -> None:
    async with httpx.AsyncClient(base_url=site.url) as api:
        sent = await api.post(
            f"/organizations/{site.globex_id}/support",
            json={"message": "the emulator is slow"},
            headers=site.headers(site.olga_key),
        )
        assert sent.status_code in (200, 201), sent.text
        hosts = await api.get("/operator/hosts", headers=site.headers(site.alice_key))
        assert hosts.status_code == 200, hosts.text
        assert hosts.json() and all(h["capacity"] == 4 for h in hosts.json())
        refused = await api.get("/operator/hosts", headers=site.headers(site.olga_key))
        assert refused.status_code == 403  # an admin of an organization, not an operator
    async with console_page(chromium) as console:
        page = console.page
        with trio.fail_after(STEP_S):
            await sign_in_with_key(console, site, site.alice_key)
            response = await console.goto(site.url + "/console/operators/")
            assert response.status == 200
            rows = await console.call(page.locator("#hosts tbody tr").count)
            assert rows == len(hosts.json())
            assert "the emulator is slow" in await console.text("main")
            box = page.locator("textarea").first
            await console.call(box.fill, "fixed: the host got more cores")
            await console.call(page.locator("form button[type=submit]").last.click)
            await console.wait("() => document.body.textContent.includes('more cores')")
            await _within_budget(console)
            await console.goto(site.url + "/console/billing/")  # the last page without one
            await _within_budget(console)
        assert console.csp_errors == []
    async with console_page(chromium) as console:
        with trio.fail_after(STEP_S):
            await sign_in_with_key(console, site, site.olga_key)
            response = await console.goto(site.url + "/console/operators/")
            assert response.status == 403
            assert "operators" in await console.text("#refused")
            assert "the emulator is slow" not in await console.call(console.page.content)


async def test_an_invited_member_joins_by_the_mailed_link(
    site: Site, chromium: BrowserThread, smtp: SmtpPeer
) -> None:
    async with console_page(chromium) as console:
        page = console.page
        with trio.fail_after(STEP_S):
            await sign_in_with_key(console, site, site.alice_key)
            await console.goto(site.url + "/console/team/")
            await console.call(page.fill, "#invite-email", "erin@example.org")
            await console.call(page.select_option, "#invite-role", "viewer")
            invite = page.locator("form[action='/console/team/invitations'] button")
            await console.call(invite.click)
            listed = "() => !!document.querySelector('[data-email=\"erin@example.org\"]')"
            await console.wait(listed)
            await _within_budget(console)
        assert console.csp_errors == []
    await eventually(lambda: any("erin@example.org" in m[1] for m in smtp.mailbox.messages))
    mail = next(m[2] for m in smtp.mailbox.messages if "erin@example.org" in m[1])
    payload = mail.get_payload(decode=True)
    assert isinstance(payload, bytes)
    match = re.search(r"(http\S+/invitations/accept\?token=\S+)", payload.decode())
    assert match is not None, payload
    async with console_page(chromium) as console:  # erin's own browser
        page = console.page
        with trio.fail_after(STEP_S):
            await console.goto(match.group(1))  # the link as mailed: the console's join page
            assert "/console/team/join" in page.url
            await console.call(page.fill, "#userName", "erin")
            await console.call(page.locator("form[action='/console/team/join'] button").click)
            await console.wait("() => !!document.getElementById('new-key')")
            key = await console.text("#new-key")
            assert key.startswith("dy_")
            await console.goto(site.url + "/console/team/")
            assert "erin" in await console.text("header")
            assert key not in await console.call(page.content)  # shown once, never again
        # olga invites erin to globex too; erin, signed in, accepts as herself.
        async with httpx.AsyncClient(base_url=site.url) as api:
            sent = await api.post(
                f"/organizations/{site.globex_id}/invitations",
                json={"email": "erin@example.org"},
                headers=site.headers(site.olga_key),
            )
            assert sent.status_code == 200, sent.text
        await eventually(
            lambda: sum("erin@example.org" in m[1] for m in smtp.mailbox.messages) == 2
        )
        mail = [m[2] for m in smtp.mailbox.messages if "erin@example.org" in m[1]][-1]
        payload = mail.get_payload(decode=True)
        assert isinstance(payload, bytes)
        again = re.search(r"(http\S+/invitations/accept\?token=\S+)", payload.decode())
        assert again is not None, payload
        with trio.fail_after(STEP_S):
            await console.goto(again.group(1))
            question = await console.text("#accept-question")
            assert question == "Join globex as erin (erin@example.org) with the role member?"
            await console.call(page.locator("#accept-button").click)
            await console.wait("() => !!document.getElementById('new-key')")
            globex_key = await console.text("#new-key")
            await console.goto(site.url + "/console/team/")
            assert "globex" in await console.text("header")
        assert console.csp_errors == []
    async with httpx.AsyncClient(base_url=site.url) as api:
        who = await api.get("/whoami", headers=site.headers(key))
        assert (who.json()["user"]["name"], who.json()["role"]) == ("erin", "viewer")
        who = await api.get("/whoami", headers=site.headers(globex_key))
        assert (who.json()["user"]["name"], who.json()["organization"]["name"]) == (
            "erin", "globex",
        )  # fmt: skip
