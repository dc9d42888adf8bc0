"""The host's network policy for devices and initial apps: a table, and properties."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from devyard.hostd.netpolicy import NetPolicy, Refusal, classify, parse_networks

CASES = [
    ("8.8.8.8", None),
    ("1.1.1.1", None),
    ("2606:4700:4700::1111", None),
    ("127.0.0.1", Refusal.LOOPBACK),
    ("127.255.0.9", Refusal.LOOPBACK),
    ("::1", Refusal.LOOPBACK),
    ("0.0.0.0", Refusal.UNSPECIFIED),  # reaches the host's own services on Linux
    ("::", Refusal.UNSPECIFIED),
    ("10.1.2.3", Refusal.PRIVATE),
    ("172.16.0.1", Refusal.PRIVATE),
    ("192.168.1.1", Refusal.PRIVATE),
    ("100.64.0.1", Refusal.PRIVATE),  # carrier-grade NAT
    ("fc00::1", Refusal.PRIVATE),
    ("fd12:3456::1", Refusal.PRIVATE),
    ("198.18.0.1", Refusal.PRIVATE),  # benchmarking
    ("192.0.2.1", Refusal.PRIVATE),  # documentation
    ("2001:db8::1", Refusal.PRIVATE),
    ("255.255.255.255", Refusal.PRIVATE),
    ("169.254.169.254", Refusal.LINK_LOCAL),  # cloud metadata
    ("fe80::1", Refusal.LINK_LOCAL),
    ("224.0.0.1", Refusal.MULTICAST),
    ("239.1.2.3", Refusal.MULTICAST),
    ("ff02::1", Refusal.MULTICAST),
    ("ff0e::1", Refusal.MULTICAST),
    # IPv6 forms that carry an IPv4 address
    ("::ffff:127.0.0.1", Refusal.LOOPBACK),
    ("::ffff:10.0.0.1", Refusal.PRIVATE),
    ("::ffff:169.254.169.254", Refusal.LINK_LOCAL),
    ("::127.0.0.1", Refusal.LOOPBACK),
    ("2002:7f00:1::", Refusal.LOOPBACK),  # 6to4 of 127.0.0.1
    ("2002:a00:1::", Refusal.PRIVATE),
    ("64:ff9b::7f00:1", Refusal.LOOPBACK),  # NAT64 of 127.0.0.1
    ("64:ff9b::808:808", None),  # NAT64 of 8.8.8.8
    ("::ffff:8.8.8.8", None),
]


@pytest.mark.parametrize(("address", "refusal"), CASES)
def test_the_default_policy(address: str, refusal: Refusal | None) -> None:
    assert NetPolicy().check(address) is refusal


def test_the_allow_list_opens_ranges_and_the_host_addresses_close_them() -> None:
    policy = NetPolicy(allow=parse_networks(["10.9.0.0/16", "127.0.0.3"]))
    assert policy.check("10.9.4.4") is None
    assert policy.check("::ffff:10.9.4.4") is None
    assert policy.check("10.8.4.4") is Refusal.PRIVATE
    assert policy.check("127.0.0.3") is None
    assert policy.check("127.0.0.1") is Refusal.LOOPBACK
    public = policy.with_host_addresses(["203.0.113.7", "8.8.4.4"])
    assert public.check("8.8.4.4") is Refusal.HOST
    assert public.check("::ffff:8.8.4.4") is Refusal.HOST
    assert public.check("8.8.8.8") is None
    assert public.check("fe80::1%eth0") is Refusal.LINK_LOCAL  # a zone does not hide it
    with pytest.raises(ValueError, match="'nope'"):
        parse_networks(["nope"])


v4 = st.integers(0, 2**32 - 1).map(ipaddress.IPv4Address)
v6 = st.integers(0, 2**128 - 1).map(ipaddress.IPv6Address)


@given(v4)
def test_every_refused_v4_address_is_refused_in_every_v6_wrapping(
    address: ipaddress.IPv4Address,
) -> None:
    mapped = ipaddress.IPv6Address(f"::ffff:{address}")
    inner = classify(address)
    assert NetPolicy().check(mapped) is inner
    sixtofour = ipaddress.IPv6Address((0x2002 << 112) | (int(address) << 80))
    if inner is not None:
        assert classify(sixtofour) is not None
        nat64 = ipaddress.IPv6Address(int(ipaddress.IPv6Address("64:ff9b::")) | int(address))
        assert classify(nat64) is not None


@given(st.one_of(v4, v6))
def test_only_global_unicast_addresses_pass_by_default(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> None:
    allowed = NetPolicy().check(address) is None
    if allowed:
        assert address.is_global
        assert not (address.is_loopback or address.is_private or address.is_link_local)
        assert not (address.is_multicast or address.is_unspecified)
    if address.is_loopback or address.is_link_local or address.is_unspecified:
        assert not allowed
