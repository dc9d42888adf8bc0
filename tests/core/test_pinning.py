"""`devyard.core.pinning`: the address policy, and a pinned request that reaches the checked
address as the original name (Host header, TLS server name and certificate check) while the
name's later DNS answers, rebound to a private address, are never asked for."""

from __future__ import annotations

import ipaddress
import ssl
from typing import Any

import httpx
import pytest
import trio
import trustme
from hypercorn.config import Config
from hypercorn.trio import serve

from devyard.core.pinning import AddressPolicy, PinningError, pin


def test_the_policy_allows_global_addresses_and_listed_networks_only() -> None:
    default = AddressPolicy()
    for text in ("93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"):
        assert default.allows(ipaddress.ip_address(text)), text
    for text in (
        "127.0.0.1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",  # a cloud's metadata service
        "100.64.0.1",  # shared address space
        "0.0.0.0",
        "::1",
        "fe80::1",
        "fd00::1",
        "::ffff:10.0.0.1",  # an IPv4-mapped private address
        "224.0.0.1",
    ):
        assert not default.allows(ipaddress.ip_address(text)), text
    internal = AddressPolicy.parse(["10.0.0.0/8", "fd00::/8"])
    assert internal.allows(ipaddress.ip_address("10.1.2.3"))
    assert internal.allows(ipaddress.ip_address("fd00::1"))
    assert not internal.allows(ipaddress.ip_address("192.168.1.1"))
    with pytest.raises(ValueError, match="not a network"):
        AddressPolicy.parse(["10.0.0.0/33"])


class _Rebinding(trio.abc.HostnameResolver):
    """Answers *first* for the first lookup of each name, then *later*: the rebinding attack."""

    def __init__(self, first: list[str], later: str) -> None:
        self.first, self.later, self.calls = first, later, 0

    async def getaddrinfo(self, host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        answers = self.first if self.calls == 1 else [self.later]
        return [
            (
                trio.socket.AF_INET6 if ":" in a else trio.socket.AF_INET,
                trio.socket.SOCK_STREAM,
                6,
                "",
                (a, int(port)) if ":" not in a else (a, int(port), 0, 0),
            )
            for a in answers
        ]

    async def getnameinfo(self, sockaddr: Any, flags: int) -> Any:
        raise OSError("not used")


async def test_a_pinned_request_reaches_the_checked_address_as_the_name() -> None:
    ca = trustme.CA()
    leaf = ca.issue_cert("hooks.example")
    seen: list[dict[str, str]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                await send({"type": message["type"] + ".complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        seen.append({k.decode(): v.decode() for k, v in scope["headers"]})
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"pinned"})

    config = Config()
    config.bind = ["127.0.0.1:0"]
    with leaf.private_key_and_cert_chain_pem.tempfile() as pem:
        config.certfile = config.keyfile = pem
        trust = ssl.create_default_context()
        ca.configure_trust(trust)
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(serve, app, config)
            port = int(binds[0].rsplit(":", 1)[1])
            resolver = _Rebinding(["127.0.0.1"], later="10.255.255.1")
            previous = trio.socket.set_custom_hostname_resolver(resolver)
            try:
                loopback = AddressPolicy.parse(["127.0.0.0/8"])
                pinned = await pin(f"https://hooks.example:{port}/hook?x=1", loopback)
                assert pinned.url == f"https://127.0.0.1:{port}/hook?x=1"
                async with httpx.AsyncClient(verify=trust, timeout=10) as client:
                    for _ in range(2):  # the second request asks DNS nothing either
                        answer = await client.get(
                            pinned.url, headers=pinned.headers, extensions=pinned.extensions
                        )
                        assert (answer.status_code, answer.text) == (200, "pinned")
                # the certificate is checked against the name (a new connection: the pool
                # would reuse the verified one): another name fails
                async with httpx.AsyncClient(verify=trust, timeout=10) as client:
                    with pytest.raises(httpx.ConnectError) as refused:
                        await client.get(pinned.url, extensions={"sni_hostname": "other.example"})
                    chain: list[BaseException] = []
                    link: BaseException | None = refused.value
                    while link is not None and len(chain) < 10:
                        chain.append(link)
                        link = link.__cause__ or link.__context__
                    assert any(isinstance(e, ssl.SSLCertVerificationError) for e in chain), chain
                assert resolver.calls == 1
                # the rebound answer is refused by the same policy
                with pytest.raises(PinningError, match=r"10\.255\.255\.1"):
                    await pin(f"https://hooks.example:{port}/hook", loopback)
            finally:
                trio.socket.set_custom_hostname_resolver(previous)
            nursery.cancel_scope.cancel()
    assert [headers["host"] for headers in seen] == [f"hooks.example:{port}"] * 2


async def test_a_name_with_one_private_answer_is_refused() -> None:
    resolver = _Rebinding(["93.184.216.34", "10.0.0.7"], later="10.0.0.7")
    previous = trio.socket.set_custom_hostname_resolver(resolver)
    try:
        with pytest.raises(PinningError) as caught:
            await pin("https://idp.example/realms/x?secret=1", AddressPolicy())
    finally:
        trio.socket.set_custom_hostname_resolver(previous)
    assert str(caught.value) == "idp.example resolves to 10.0.0.7, which is not a public address"
    with pytest.raises(PinningError, match="not an http"):
        await pin("ftp://idp.example/", AddressPolicy())
