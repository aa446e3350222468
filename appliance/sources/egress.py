"""Egress policy: pages may only be fetched from public addresses.

Search results and redirects are chosen by other people's servers; without this check a page
could send the fetcher to the cloud metadata service, the router, or a service on this
machine. Every hop is resolved and checked, and the fetcher then connects to the address that
was checked (not a second DNS answer), which closes the DNS-rebinding window.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from dataclasses import dataclass
from typing import Iterable, Union

from ..errors import FetchError

IPAddress = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]
IPNetwork = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]

# Cloud metadata services. Both are inside ranges refused anyway (link-local, unique-local);
# they are named so the refusal says what it protected.
METADATA_ADDRESSES = frozenset({ipaddress.ip_address("169.254.169.254"),
                                ipaddress.ip_address("fd00:ec2::254")})


class EgressRefused(FetchError):
    """The policy refused a host: it resolves to an address that is not public."""


def address_problem(ip: IPAddress) -> str | None:
    """Why this address may not be fetched, or None when it is public.

    IPv6 forms that carry an IPv4 address (IPv4-mapped, IPv4-compatible, 6to4, Teredo) are
    judged by the IPv4 address inside, since that is where the packets end up.
    """
    if ip in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if isinstance(ip, ipaddress.IPv6Address):
        inner = _embedded_ipv4(ip)
        if inner is not None:
            reason = address_problem(inner)
            return f"{reason} (inside {ip})" if reason else None
    for test, label in (("is_unspecified", "unspecified"), ("is_loopback", "loopback"),
                        ("is_link_local", "link-local"), ("is_multicast", "multicast"),
                        ("is_private", "private"), ("is_reserved", "reserved")):
        if getattr(ip, test):
            return f"{'an' if label[0] in 'aeiou' else 'a'} {label} address"
    if not ip.is_global:  # shared address space (100.64/10), documentation ranges...
        return "a non-public address"
    return None


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    packed = ip.packed
    # IPv4-compatible (::a.b.c.d, deprecated but still routed by some stacks); :: and ::1
    # are left to the unspecified/loopback tests.
    if packed[:12] == bytes(12) and int.from_bytes(packed[12:], "big") > 1:
        return ipaddress.IPv4Address(packed[12:])
    return None


@dataclass(frozen=True)
class AllowList:
    """The hosts the user lets through although they are not public (settings.fetch.allow_hosts).

    A name entry allows that host name whatever it resolves to (``.corp.example`` or
    ``*.corp.example`` also allow its subdomains); an IP or CIDR entry allows those addresses
    whatever name led to them.
    """

    names: frozenset[str] = frozenset()
    suffixes: tuple[str, ...] = ()
    networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> "AllowList":
        names, suffixes, networks = set(), [], []
        for raw in entries:
            entry = str(raw).strip().lower().strip("[]")
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
                continue
            except ValueError:
                pass
            if entry.startswith("*."):
                suffixes.append(entry[1:])
            elif entry.startswith("."):
                suffixes.append(entry)
            else:
                names.add(entry.rstrip("."))
        return cls(frozenset(names), tuple(suffixes), tuple(networks))

    def allows_name(self, host: str) -> bool:
        host = host.lower().rstrip(".")
        return host in self.names or any(host.endswith(s) for s in self.suffixes)

    def allows_address(self, ip: IPAddress) -> bool:
        candidates = [ip]
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            candidates.append(ip.ipv4_mapped)
        return any(c in net for c in candidates for net in self.networks if c.version == net.version)


def resolve(host: str, port: int, timeout: float | None = None) -> list[IPAddress]:
    """All addresses the host resolves to (an IP literal resolves to itself).

    ``timeout`` bounds the lookup: getaddrinfo has no timeout of its own, and a resolver that
    never answers would otherwise hold a fetch forever, outside its total deadline.
    """
    literal = _ip_literal(host)
    if literal is not None:
        return [literal]
    infos = _getaddrinfo(host, port, timeout)
    found: list[IPAddress] = []
    for info in infos:
        # Drop an IPv6 zone id ("fe80::1%eth0") before parsing; the address still gets judged.
        ip = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if ip not in found:
            found.append(ip)
    if not found:
        raise FetchError(f"cannot resolve host {host}: no addresses")
    return found


def _getaddrinfo(host: str, port: int, timeout: float | None) -> list:
    if timeout is None:
        return _lookup(host, port)
    outcome: list = []

    def lookup() -> None:
        try:
            outcome.append(_lookup(host, port))
        except FetchError as exc:
            outcome.append(exc)

    # A daemon thread: a lookup that never returns must not keep the process alive at exit.
    worker = threading.Thread(target=lookup, name=f"resolve {host}", daemon=True)
    worker.start()
    worker.join(timeout)
    if not outcome:
        raise FetchError(f"cannot resolve host {host}: no answer within {timeout:g} s",
                         hint="check the resolver in /etc/resolv.conf, or raise fetch.connect_timeout")
    if isinstance(outcome[0], FetchError):
        raise outcome[0]
    return outcome[0]


def _lookup(host: str, port: int) -> list:
    try:
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise FetchError(f"cannot resolve host {host}: {exc}") from None


def _ip_literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return None


def check_addresses(host: str, addresses: list[IPAddress], allow: AllowList) -> None:
    """Raise EgressRefused unless every address is public or allowed.

    Every address must pass, not just one: the connection may go to any of them.
    """
    if allow.allows_name(host):
        return
    for ip in addresses:
        problem = address_problem(ip)
        if problem and not allow.allows_address(ip):
            shown = host if str(ip) == host.strip("[]") else f"{host} ({ip})"
            raise EgressRefused(f"refused by egress policy: {shown} is {problem}",
                                hint="add the host to fetch.allow_hosts if it is meant to be fetched")


def checked_addresses(host: str, port: int, allow: AllowList, timeout: float | None = None) -> list[IPAddress]:
    """Resolve ``host`` (within ``timeout`` seconds) and check every address; return them for the connection."""
    addresses = resolve(host, port, timeout)
    check_addresses(host, addresses, allow)
    return addresses
