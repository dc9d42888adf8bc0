"""Browser tests of the console: one real server (API, edge, console) and one host daemon per
module, running in a thread of their own (their own trio run), so every test of the module
shares them; Debian's Chromium through `tests.browser.BrowserThread`.

The site has two organizations: acme (alice, admin, whose key signs in; single sign-on
through the test OpenID provider for example.com, verified) and globex (olga, admin).
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, suppress
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import httpx
import pytest
import trio

from devyard.hostd.daemon import HostdConfig, serve_hostd
from devyard.server.accounts.settings import AccountsConfig
from devyard.server.api.serve import BoundServer
from devyard.server.bootstrap import bootstrap_organization
from devyard.server.config import ListenAddress, RateLimitConfig, ServerConfig
from devyard.server.edge import HOST_TOKENS_FILE, create_host_token
from devyard.server.serve import open_configured_store, serve_server
from tests.browser import BrowserThread
from tests.server.accounts.oidc_provider import CLIENT_ID, CLIENT_SECRET, LOOPBACK, Provider

if TYPE_CHECKING:
    from playwright.async_api import Page

STEP_S = 15.0  # the bound of each step of a test, in trio and in Playwright
STEP_MS = STEP_S * 1000
BUDGET_BYTES = 100_000  # JS+CSS transferred by one page (issue 22)
BUILD_REGION = "builds"  # the gradle host's region: build instances are pinned there
BUILD_TOOLS = ("bwrap", "gradle", "java", "xdelta3", "setpriv", "prlimit")  # tests/builds


@attrs.frozen
class Site:
    url: str
    alice_key: str = attrs.field(repr=False)  # admin of acme
    acme_id: str
    olga_key: str = attrs.field(repr=False)  # admin of globex
    globex_id: str
    provider: Provider
    builds: bool  # a gradle host serves build instances

    def headers(self, key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}


class SiteThread:
    """The site, served by a trio run in a thread until ``close``."""

    def __init__(
        self, path: Path, provider: Provider, accounts: AccountsConfig | None = None
    ) -> None:
        #: build instances too, where this machine has what the gradle driver needs
        self.builds = all(shutil.which(tool) for tool in BUILD_TOOLS)
        self._path = path
        self._provider = provider
        self._accounts = accounts  # with SMTP: invitations are mailed
        self._ready = threading.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._error: BaseException | None = None
        self.site: Site | None = None
        self._thread = threading.Thread(target=self._main, name="console-site", daemon=True)
        self._thread.start()
        if not self._ready.wait(120):
            raise RuntimeError("the console test site did not start in 120 s")
        if self._error is not None:
            raise RuntimeError(f"the site did not start: {self._error!r}") from self._error

    def _main(self) -> None:
        try:
            trio.run(self._serve)
        except BaseException as exc:
            self._error = self._error or exc
            self._ready.set()

    async def _serve(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        server_dir = self._path / "server"
        config = ServerConfig(
            data_dir=server_dir,
            listen=ListenAddress("127.0.0.1", 0),
            rate_limit=RateLimitConfig(enabled=False),
            shutdown_grace=1,
        )
        # the provider is on loopback, which SSO refuses unless listed (docs/accounts.md)
        accounts = self._accounts or config.accounts
        config = attrs.evolve(
            config, accounts=attrs.evolve(accounts, oidc_allowed_networks=LOOPBACK)
        )
        async with open_configured_store(config) as store:
            acme = await bootstrap_organization(store, org_name="acme", user_name="alice")
            globex = await bootstrap_organization(store, org_name="globex", user_name="olga")
            await store.replace_domains(acme.organization.id, {"example.com": "t"})
            await store.mark_domain_verified(acme.organization.id, "example.com")
            await store.set_operator(acme.user.id, True)  # alice operates the deployment
        _, host_token = create_host_token(server_dir / HOST_TOKENS_FILE)
        _, build_token = create_host_token(server_dir / HOST_TOKENS_FILE)  # one per host
        async with trio.open_nursery() as nursery:
            bound: BoundServer = await nursery.start(partial(serve_server, config))
            self._provider.client.redirect_uri = f"{bound.local_url}/auth/oidc/callback"
            shutdown = trio.Event()
            hostd = HostdConfig(
                server_url=bound.local_url,
                token=host_token,
                region=config.region,
                data_dir=self._path / "host",
                capacity=4,
                backoff_base=0.05,
            )
            hosts = [hostd]
            if self.builds:  # a second host with the gradle driver (build instances)
                hosts.append(
                    attrs.evolve(
                        hostd,
                        token=build_token,
                        data_dir=self._path / "build-host",
                        drivers=("gradle",),
                        hostname="build-host",
                        region=BUILD_REGION,  # the virtual host serves build platforms too
                    )
                )
            async with trio.open_nursery() as host_nursery:
                for host in hosts:
                    await host_nursery.start(partial(serve_hostd, host, shutdown=shutdown))
                with trio.fail_after(30):
                    while not (bound.hosts and len(bound.hosts.hosts()) == len(hosts)):  # noqa: ASYNC110
                        await trio.sleep(0.02)
                async with httpx.AsyncClient(base_url=bound.local_url) as client:
                    put = await client.put(
                        f"/organizations/{acme.organization.id}/oidcConnection",
                        json={
                            "issuer": self._provider.issuer,
                            "clientId": CLIENT_ID,
                            "clientSecret": CLIENT_SECRET,
                            "allowedDomains": ["example.com"],
                        },
                        headers={"Authorization": f"Bearer {acme.plaintext_key}"},
                    )
                    assert put.status_code == 200, put.text
                self.site = Site(
                    url=bound.local_url,
                    alice_key=acme.plaintext_key,
                    acme_id=acme.organization.id,
                    olga_key=globex.plaintext_key,
                    globex_id=globex.organization.id,
                    provider=self._provider,
                    builds=self.builds,
                )
                self._ready.set()
                await self._stop.wait()
                shutdown.set()
                host_nursery.cancel_scope.deadline = trio.current_time() + 15
            nursery.cancel_scope.cancel()

    def close(self) -> None:
        if self._token is not None and self._stop is not None:
            stop = self._stop
            with suppress(trio.RunFinishedError):
                self._token.run_sync_soon(stop.set)
        self._thread.join(60)


@pytest.fixture(scope="module")
def chromium() -> Iterator[BrowserThread]:
    browser = BrowserThread()
    try:
        yield browser
    finally:
        browser.close()


@attrs.define
class ConsolePage:
    """A page of a fresh browser context, and what it loaded and complained about."""

    page: Page
    chromium: BrowserThread
    csp_errors: list[str] = attrs.field(factory=list)
    responses: list[Any] = attrs.field(factory=list)

    async def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return await self.chromium.call(fn, *args, **kwargs)

    async def goto(self, url: str) -> Any:
        self.responses.clear()
        return await self.call(self.page.goto, url)

    async def wait(self, expression: str, arg: Any = None) -> None:
        await self.call(
            self.page.wait_for_function, expression, arg=arg, timeout=STEP_MS, polling=50
        )

    async def text(self, selector: str) -> str:
        value = await self.call(self.page.text_content, selector)
        return value or ""

    async def static_bytes(self) -> int:
        """JS+CSS bytes the current page loaded needs over the wire (compressed), whether or
        not the browser had them cached: each file's Content-Length as the server sent it."""
        total = 0
        for response in list(self.responses):
            if response.request.resource_type not in ("script", "stylesheet"):
                continue
            length = await self.call(response.header_value, "content-length")
            assert length is not None, response.url
            total += int(length)
        return total


@asynccontextmanager
async def console_page(
    chromium: BrowserThread, *, width: int = 1200, height: int = 900, mobile: bool = False
) -> AsyncIterator[ConsolePage]:
    """A page in a fresh browser context (its own cookies), closed on the way out. Dialogs
    (delete confirmations) are accepted; CSP violations reported by the browser are kept."""
    browser = chromium.browser
    assert browser is not None
    made: list[ConsolePage] = []

    async def new_page() -> Page:  # on the browser's loop, as every Playwright call
        context = await browser.new_context(
            viewport={"width": width, "height": height}, is_mobile=mobile, has_touch=mobile
        )
        context.set_default_timeout(STEP_MS)
        page = await context.new_page()
        holder = ConsolePage(page, chromium)
        made.append(holder)

        def on_console(message: Any) -> None:
            if "Content Security Policy" in message.text or "Content-Security-Policy" in (
                message.text
            ):
                holder.csp_errors.append(message.text)

        page.on("console", on_console)
        page.on("dialog", lambda dialog: dialog.accept())

        def on_response(response: Any) -> None:  # (Playwright tags its handlers: no builtins)
            holder.responses.append(response)

        page.on("response", on_response)

        def on_navigated(frame: Any) -> None:  # a new page: count its own files only
            if frame == page.main_frame:
                holder.responses.clear()

        page.on("framenavigated", on_navigated)
        return page

    await chromium.call(new_page)
    try:
        yield made[0]
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(STEP_S):
            await chromium.call(made[0].page.context.close)


async def sign_in_with_key(console: ConsolePage, site: Site, key: str) -> None:
    await console.goto(f"{site.url}/console/")
    await console.call(console.page.fill, "#apiKey", key)
    await console.call(console.page.click, "form[action='/console/sign-in'] button")
    await console.call(console.page.wait_for_url, f"{site.url}/console/instances/")
