"""The tunnels, assets and usage pages in Debian's Chromium against one real server and host
daemon for the module (`browser.SiteThread`): create a tunnel in the page, start a real
``devyard connector run`` with the command the page showed and see the tunnel go online;
upload an asset by the drop zone with progress to 100 % and see its md5; usage charts with
data and the CSV. No CSP violation anywhere; every page under the 100 KB JS+CSS budget."""

from __future__ import annotations

import hashlib
import shlex
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import trio

from tests.browser import NEEDS_CHROMIUM, BrowserThread
from tests.e2e._cli import clean_env, start
from tests.server.accounts.oidc_provider import Provider

from .browser import (
    BUDGET_BYTES,
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
def site(tmp_path_factory: pytest.TempPathFactory, provider: Provider) -> Iterator[Site]:
    thread = SiteThread(tmp_path_factory.mktemp("console-pages"), provider)
    try:
        assert thread.site is not None
        yield thread.site
    finally:
        thread.close()


async def _within_budget(console: ConsolePage) -> None:
    used = await console.static_bytes()
    assert 0 < used < BUDGET_BYTES, used


async def test_a_tunnel_made_in_the_page_goes_online_when_its_connector_runs(
    site: Site, chromium: BrowserThread, tmp_path: Path
) -> None:
    async with console_page(chromium) as console:
        page = console.page
        with trio.fail_after(STEP_S):
            await sign_in_with_key(console, site, site.alice_key)
            await console.goto(f"{site.url}/console/tunnels/")
            await _within_budget(console)
            await console.call(page.fill, "#name", "office")
            await console.call(page.fill, "#selectors", "127.0.0.1:8080")
            await console.call(page.click, "text=Create tunnel")
            await console.call(page.wait_for_selector, "#connector-command")
            command = await console.text("#connector-command")
            token = await console.text("#tunnel-token")
            assert token.startswith("dyt_")
        # the command as shown, run for real (the devyard executable of this interpreter)
        words = shlex.split(command)
        assert words[0] == f"DEVYARD_TUNNEL_TOKEN={token}"
        assert words[1:5] == ["devyard", "connector", "run", "--server"] and words[5] == site.url
        connector = await start(words[2:], clean_env(DEVYARD_TUNNEL_TOKEN=token), tmp_path)
        try:
            with trio.fail_after(STEP_S * 2):
                await console.goto(f"{site.url}/console/tunnels/")
                # the table polls itself: the tunnel shows online with its connector
                await console.wait(
                    """() => {
                         const row = document.querySelector("tr[data-name='office']");
                         return row && row.querySelector('.tunnel-status').textContent === 'online';
                       }"""
                )
                row = await console.text("tr[data-name='office']")
                assert socket.gethostname() in row
                assert token not in await console.call(page.content)
                await console.call(page.click, "tr[data-name='office'] a")
                await console.call(page.wait_for_url, f"{site.url}/console/tunnels/office")
                assert await console.text("#tunnel-status") == "online"
        finally:
            await connector.stop(signal.SIGTERM)
        with trio.fail_after(STEP_S):
            await console.call(page.click, "text=Delete")
            await console.call(page.wait_for_url, f"{site.url}/console/tunnels/")
            assert "office" not in await console.text("#tunnels-table")
        assert console.csp_errors == []


async def test_an_asset_uploads_from_the_drop_zone_with_progress(
    site: Site, chromium: BrowserThread, tmp_path: Path
) -> None:
    app = tmp_path / "checkout.apk"
    app.write_bytes(bytes(range(256)) * 8192)  # 2 MiB: several progress events
    md5 = hashlib.md5(app.read_bytes()).hexdigest()
    async with console_page(chromium) as console:
        page = console.page
        with trio.fail_after(STEP_S):
            await sign_in_with_key(console, site, site.alice_key)
            await console.goto(f"{site.url}/console/assets/")
            await _within_budget(console)
            await console.call(page.select_option, "#platform", "android")
            await console.call(page.set_input_files, "#dropzone input[type=file]", str(app))
            await console.wait(
                "() => document.getElementById('upload-percent').textContent === '100 %'"
            )
            assert (
                await console.call(page.eval_on_selector, "#upload-progress", "e => e.value") == 100
            )
            assert await console.text("#upload-label") == "Uploaded checkout.apk"
            await console.wait(
                """(md5) => {
                     const row = document.querySelector("tr[data-name='checkout.apk']");
                     const cell = row && row.querySelector('.md5');
                     return cell && cell.textContent === md5;
                   }""",
                md5,
            )
            row = await console.text("tr[data-name='checkout.apk']")
            assert "2.0 MB" in row and "android" in row
        assert console.csp_errors == []


async def test_usage_charts_have_data_and_the_csv_its_rows(
    site: Site, chromium: BrowserThread
) -> None:
    async with httpx.AsyncClient(base_url=site.url, headers=site.headers(site.alice_key)) as api:
        with trio.fail_after(STEP_S * 2):
            made = await api.post("/v1/android_instances", params={"wait": "true"}, json={})
            assert made.status_code == 200, made.text
            ended = await api.delete(f"/v1/android_instances/{made.json()['id']}")
            assert ended.status_code == 200, ended.text
    async with console_page(chromium) as console:
        page = console.page
        with trio.fail_after(STEP_S):
            await sign_in_with_key(console, site, site.alice_key)
            # the instance shows once billed (its end is recorded): reload until it does
            while True:
                await console.goto(f"{site.url}/console/usage/")
                if await console.text("#total-instances") != "0":
                    break
            await _within_budget(console)
            for chart in ("#chart-minutes", "#chart-instances"):
                await console.wait(
                    "(sel) => { const n = document.querySelector(sel);"
                    " return n && n.querySelector('canvas') && Number(n.dataset.points) > 0; }",
                    chart,
                )
            legend = await console.text("#chart-minutes")
            assert "android · " in legend
            csv_text = await console.call(
                page.evaluate,
                "async () => (await fetch(document.getElementById('csv-link').href)).text()",
            )
            lines = csv_text.splitlines()
            assert lines[0].startswith("bucketStart,platform,region,instances,billedMinutes")
            assert any(",android," in line and ",1," in line for line in lines[1:]), lines
        assert console.csp_errors == []
