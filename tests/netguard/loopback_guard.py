"""Loopback only: the test suite's network guard, for the test process and its children.

``install()`` makes every non-loopback TCP/UDP connection and every DNS lookup of a name
other than localhost fail at once. tests/conftest.py installs it in the test process;
``sitecustomize.py`` beside this file installs it in every Python child process, because
conftest puts this folder on PYTHONPATH (SearXNG, `python -m appliance` runs, batch workers).

Not covered: programs that are not Python, and native libraries that open sockets without
Python's socket module.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Callable


class NetworkBlocked(ConnectionRefusedError):
    """A test tried to connect beyond loopback."""


def is_loopback(address) -> bool:
    """Whether a socket address stays on this machine."""
    if not isinstance(address, tuple) or not address:
        return True  # AF_UNIX paths and the like never leave the machine
    host = address[0]
    if host in ("localhost",):
        return True
    try:
        ip = ipaddress.ip_address(str(host).split("%", 1)[0])
    except ValueError:
        return False
    if ip.version == 6 and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def _lookup_allowed(host) -> bool:
    """A name lookup that cannot leave the machine: no name, an IP literal, or localhost."""
    if host is None:
        return True
    name = host.decode("ascii", "replace") if isinstance(host, bytes) else str(host)
    name = name.strip().rstrip(".").lower()
    if name in ("", "localhost") or name.endswith(".localhost"):
        return True
    try:
        ipaddress.ip_address(name.strip("[]").split("%", 1)[0])
        return True
    except ValueError:
        return False


def install(on_block: Callable[[str], None] | None = None) -> Callable[[], None]:
    """Install the guard; returns a function that removes it. ``on_block(message)`` is called
    for every refused connection or lookup (scripts/bench_peers.py records them)."""
    note = on_block or (lambda message: None)
    real = {name: getattr(socket.socket, name) for name in ("connect", "connect_ex")}
    real_getaddrinfo = socket.getaddrinfo
    real_gethostbyname = socket.gethostbyname
    real_gethostbyname_ex = socket.gethostbyname_ex

    def guarded(method):
        def call(self, address):
            if self.family in (socket.AF_INET, socket.AF_INET6) and not is_loopback(address):
                message = f"test network guard: connection to {address!r} refused (loopback only)"
                note(message)
                raise NetworkBlocked(message)
            return real[method](self, address)
        return call

    def refuse_lookup(host) -> None:
        # A lookup of any other name would send a DNS query off the machine; failing it as
        # "no such name" is what the code under test must handle anyway.
        message = f"test network guard: DNS lookup of {host!r} refused (loopback only)"
        note(message)
        raise socket.gaierror(socket.EAI_NONAME, message)

    def getaddrinfo(host, *args, **kwargs):
        if not _lookup_allowed(host):
            refuse_lookup(host)
        return real_getaddrinfo(host, *args, **kwargs)

    def gethostbyname(host):
        if not _lookup_allowed(host):
            refuse_lookup(host)
        return real_gethostbyname(host)

    def gethostbyname_ex(host):
        if not _lookup_allowed(host):
            refuse_lookup(host)
        return real_gethostbyname_ex(host)

    socket.socket.connect = guarded("connect")
    socket.socket.connect_ex = guarded("connect_ex")
    socket.getaddrinfo, socket.gethostbyname, socket.gethostbyname_ex = getaddrinfo, gethostbyname, gethostbyname_ex

    def uninstall() -> None:
        socket.socket.connect, socket.socket.connect_ex = real["connect"], real["connect_ex"]
        socket.getaddrinfo, socket.gethostbyname = real_getaddrinfo, real_gethostbyname
        socket.gethostbyname_ex = real_gethostbyname_ex

    return uninstall
