"""The egress policy checker: which addresses may be fetched, and the allow list."""

from __future__ import annotations

import ipaddress
import socket

import pytest

from appliance.errors import FetchError
from appliance.sources.egress import (AllowList, EgressRefused, address_problem, check_addresses,
                                      checked_addresses)

REFUSED = [
    ("169.254.169.254", "metadata"), ("fd00:ec2::254", "metadata"),
    ("10.1.2.3", "private"), ("172.16.0.1", "private"), ("192.168.1.1", "private"),
    ("127.0.0.1", "loopback"), ("127.8.9.10", "loopback"), ("::1", "loopback"),
    ("::ffff:127.0.0.1", "loopback"), ("::ffff:10.0.0.1", "private"),
    ("::ffff:169.254.169.254", "metadata"), ("::127.0.0.1", "loopback"),
    ("169.254.1.1", "link-local"), ("fe80::1", "link-local"),
    ("224.0.0.1", "multicast"), ("ff02::1", "multicast"),
    ("0.0.0.0", "unspecified"), ("::", "unspecified"),
    ("240.0.0.1", ""), ("100.64.0.1", "non-public"), ("192.0.2.10", ""),
    ("fc00::1", "private"), ("2002:a00:1::1", "private"),  # 6to4 around 10.0.0.1
]


@pytest.mark.parametrize("address, word", REFUSED)
def test_non_public_addresses_are_refused(address, word):
    problem = address_problem(ipaddress.ip_address(address))
    assert problem is not None
    assert word in problem


@pytest.mark.parametrize("address", ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8",
                                     "93.184.216.34"])
def test_public_addresses_pass(address):
    assert address_problem(ipaddress.ip_address(address)) is None


def test_refusal_names_host_address_and_fix():
    with pytest.raises(EgressRefused) as caught:
        check_addresses("metadata.internal", [ipaddress.ip_address("169.254.169.254")], AllowList.parse([]))
    text = caught.value.one_line()
    assert "metadata.internal" in text and "169.254.169.254" in text and "fetch.allow_hosts" in text
    assert isinstance(caught.value, FetchError)


def test_every_resolved_address_must_pass():
    mixed = [ipaddress.ip_address("93.184.216.34"), ipaddress.ip_address("10.0.0.7")]
    with pytest.raises(EgressRefused):
        check_addresses("rebind.example", mixed, AllowList.parse([]))


def test_allow_list_by_name_ip_cidr_and_suffix():
    allow = AllowList.parse(["intranet.example", "127.0.0.1", "10.20.0.0/16", "*.corp.example", "[::1]"])
    check_addresses("intranet.example", [ipaddress.ip_address("10.9.9.9")], allow)
    check_addresses("wiki.corp.example", [ipaddress.ip_address("192.168.3.3")], allow)
    check_addresses("anything", [ipaddress.ip_address("10.20.4.5")], allow)
    check_addresses("127.0.0.1", [ipaddress.ip_address("127.0.0.1")], allow)
    check_addresses("::ffff:127.0.0.1", [ipaddress.ip_address("::ffff:127.0.0.1")], allow)
    check_addresses("[::1]", [ipaddress.ip_address("::1")], allow)
    with pytest.raises(EgressRefused):
        check_addresses("other", [ipaddress.ip_address("10.21.0.1")], allow)
    with pytest.raises(EgressRefused):
        check_addresses("corp.example.evil", [ipaddress.ip_address("192.168.3.3")], allow)


def test_ip_literals_resolve_to_themselves_and_are_checked():
    with pytest.raises(EgressRefused):
        checked_addresses("169.254.169.254", 80, AllowList.parse([]))
    with pytest.raises(EgressRefused):
        checked_addresses("[::ffff:127.0.0.1]", 80, AllowList.parse([]))
    assert checked_addresses("127.0.0.1", 80, AllowList.parse(["127.0.0.1"])) == [ipaddress.ip_address("127.0.0.1")]


def test_localhost_name_is_refused_unless_allowed():
    with pytest.raises(EgressRefused):
        checked_addresses("localhost", 80, AllowList.parse([]))
    checked_addresses("localhost", 80, AllowList.parse(["localhost"]))


def test_unresolvable_host_is_a_fetch_error(monkeypatch):
    def no_answer(*args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    # No real lookup: a DNS query for a made-up name would leave the machine.
    monkeypatch.setattr(socket, "getaddrinfo", no_answer)
    with pytest.raises(FetchError) as caught:
        checked_addresses("no-such-host.example", 80, AllowList.parse([]))
    assert "cannot resolve" in caught.value.one_line()


def test_a_resolver_that_never_answers_is_bounded(monkeypatch, sources_settings):
    """getaddrinfo has no timeout of its own: a hung resolver must cost a fetch at most its
    connect timeout, and fail that page only, with a message naming the cause."""
    import threading
    import time

    from appliance.sources.fetch import Fetcher

    release = threading.Event()

    def hangs(*args, **kwargs):
        release.wait(30)  # a resolver that does not answer (released at the end of the test)
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    monkeypatch.setattr(socket, "getaddrinfo", hangs)
    try:
        started = time.monotonic()
        with pytest.raises(FetchError) as caught:
            checked_addresses("slow-dns.example", 80, AllowList.parse([]), timeout=0.3)
        assert time.monotonic() - started < 2
        assert "no answer within 0.3 s" in caught.value.one_line()

        settings = sources_settings.with_overrides({"fetch.connect_timeout": 0.5})
        with Fetcher(settings) as fetcher:
            started = time.monotonic()
            source = fetcher.fetch("http://slow-dns.example/page")
        assert time.monotonic() - started < 3
        assert not source.ok and "cannot resolve host slow-dns.example" in source.error
    finally:
        release.set()
