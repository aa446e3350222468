"""The suite itself may reach nothing but loopback (the guard lives in tests/netguard and is
installed by conftest.py, for the test process and its Python child processes)."""

import os
import socket
import subprocess
import sys

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


def test_dns_lookups_of_other_names_are_refused():
    # A lookup would send a query to a DNS server off the machine.
    with pytest.raises(socket.gaierror, match="network guard"):
        socket.getaddrinfo("example.com", 80)
    with pytest.raises(socket.gaierror, match="network guard"):
        socket.gethostbyname("example.com")
    assert socket.getaddrinfo("localhost", 80)
    assert socket.getaddrinfo("127.0.0.1", 80)


_CHILD = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], 80), timeout=2)
except ConnectionRefusedError as exc:
    print("blocked" if "network guard" in str(exc) else "refused")
except OSError as exc:
    print("other", exc)
else:
    print("connected")
try:
    socket.getaddrinfo("example.com", 80)
except socket.gaierror as exc:
    print("dns blocked" if "network guard" in str(exc) else "dns failed")
"""


def test_python_child_processes_are_guarded_too():
    # Child processes (SearXNG, `python -m appliance` runs, batch workers) inherit the guard
    # through PYTHONPATH; programs that are not Python are not covered.
    result = subprocess.run([sys.executable, "-c", _CHILD, "192.0.2.1"], capture_output=True, text=True,
                            timeout=60, env=dict(os.environ))
    assert result.stdout.split("\n")[:2] == ["blocked", "dns blocked"], result.stdout + result.stderr
