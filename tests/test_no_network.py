"""The suite itself may reach nothing but loopback (the guard lives in conftest.py)."""

import socket

import httpx
import pytest

from conftest import NetworkBlocked


@pytest.mark.parametrize("address", [("192.0.2.1", 80), ("10.0.0.5", 443), ("169.254.169.254", 80)])
def test_connections_beyond_loopback_are_blocked(address):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        with pytest.raises(NetworkBlocked):
            sock.connect(address)


def test_ipv6_beyond_loopback_is_blocked():
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as sock:
        with pytest.raises(NetworkBlocked):
            sock.connect(("2001:db8::1", 80, 0, 0))


def test_http_clients_are_blocked_too():
    with pytest.raises(httpx.ConnectError):
        httpx.get("http://192.0.2.1/", timeout=2)


def test_loopback_is_allowed(fixture_site):
    assert httpx.get(fixture_site.url + "/pages/vostok.html", timeout=5).status_code == 200
