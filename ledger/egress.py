"""Where a webhook may be sent: the SSRF policy of application subscriptions.

A subscription's URL is chosen by whoever holds an operator token, and the deliverer POSTs to
it from inside the network, so it must not reach what only the network should: the cloud's
metadata service, the database, the admin, the API itself. The policy:

- **at subscription** (``check_url``): an http(s) URL without ``user:password@``, whose host is
  not the API's own (``RUNLEDGER_PUBLIC_URL``'s, ``ALLOWED_HOSTS``), not a metadata name
  (``metadata.google.internal``…), not ``localhost``, and — when it is an address — not a
  private, loopback, link-local, multicast, unspecified, reserved, shared (CGNAT 100.64/10) or
  IPv4-mapped one of those;
- **at delivery** (``post``): the name is resolved, *every* address it resolves to is checked
  the same way, and the connection goes to the checked address (never a second lookup, which a
  DNS-rebinding name would answer differently). TLS still verifies the certificate of the name.
  Redirects are never followed: any answer outside 2xx is a failed delivery.

``RUNLEDGER_WEBHOOK_ALLOWED_NETWORKS`` lets receivers inside the network through: CIDRs
(``10.20.0.0/16``, ``::1/128``) and host names (``hooks.internal.example``) that are
allowed whatever they resolve to. It is empty by default: nothing internal is reachable.

Only the standard library (``ipaddress``, ``socket``, ``http.client``): the SSRF guards on
PyPI are young single-author packages or wrap requests, and pinning the address needs only a
connection whose socket is opened to the checked address.
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import SplitResult, urlsplit

from ledger.conf import conf

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
#: ``socket.getaddrinfo``'s shape (the default, looked up at each call).
Resolver = Callable[..., list[tuple[Any, ...]]]

#: Names of cloud metadata services (their addresses are link-local or private already).
METADATA_NAMES = frozenset(
    {
        "metadata.google.internal",
        "metadata.goog",
        "metadata",
        "instance-data",
        "instance-data.ec2.internal",
        "metadata.azure.internal",
    }
)
#: Ranges ``ipaddress`` does not call private but that are not the public internet either.
_EXTRA_BLOCKED: tuple[Network, ...] = (
    ipaddress.ip_network("100.64.0.0/10"),  # shared address space (carrier-grade NAT)
    ipaddress.ip_network("192.0.0.0/24"),  # IETF protocol assignments
    ipaddress.ip_network("198.18.0.0/15"),  # benchmarking
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class Refused(ValueError):
    """The URL (or what its name resolves to) is outside the webhook policy; says why."""


def check_url(url: str) -> SplitResult:
    """``url`` split, when the policy lets a subscription name it; ``Refused`` otherwise.
    Nothing is resolved here (a subscription is checked inside its transaction): names are
    resolved and checked again at each delivery."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Refused("only http(s) URLs with a host")
    if parts.username is not None or parts.password is not None:
        raise Refused("a webhook URL may not carry a user name or password (user:pw@)")
    host = parts.hostname.rstrip(".").lower()
    if _host_allowed(host):
        return parts
    address = literal_address(host)
    if address is not None:
        check_address(address)
        if host in own_hosts() and not any(address in n for n in allowed_networks()):
            raise Refused(f"{host} is runledger's own host" + _HOW_TO_ALLOW)
        return parts
    if host in METADATA_NAMES:
        raise Refused(f"{host} is a cloud metadata service")
    if host == "localhost" or host.endswith(".localhost"):
        raise Refused(f"{host} is this machine (loopback)" + _HOW_TO_ALLOW)
    if host in own_hosts():
        raise Refused(f"{host} is runledger's own host" + _HOW_TO_ALLOW)
    return parts


def check_address(address: Address) -> None:
    """``Refused`` when ``address`` is not a public internet address and no allowed network
    holds it."""
    if any(address in network for network in allowed_networks()):
        return
    why = blocked_because(address)
    if why:
        raise Refused(f"{address} is {why}" + _HOW_TO_ALLOW)


def blocked_because(address: Address) -> str:
    """Why ``address`` is not a public internet address ('' when it is one). An address that
    carries an IPv4 address (IPv4-mapped, NAT64, 6to4, Teredo) is judged by that address too."""
    if isinstance(address, ipaddress.IPv6Address):
        inner = address.ipv4_mapped or address.sixtofour or (address.teredo or (None, None))[1]
        if inner is None and address in _NAT64:
            inner = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if inner is not None:
            why = blocked_because(inner)
            if why:
                return f"{why} (as {inner})"
    for why, hit in (
        ("a loopback address", address.is_loopback),
        ("an unspecified address", address.is_unspecified),
        ("a link-local address (cloud metadata lives there)", address.is_link_local),
        ("a multicast address", address.is_multicast),
        ("a reserved address", address.is_reserved),
        ("a private address", address.is_private),
        ("a shared or special-purpose address", any(address in n for n in _EXTRA_BLOCKED)),
        ("not a public internet address", not address.is_global),
    ):
        if hit:
            return why
    return ""


def literal_address(host: str) -> Address | None:
    """The address ``host`` spells, in any form a resolver would take without asking DNS
    (``127.0.0.1``, ``::1``, and the old ``127.1``, ``2130706433``, ``0x7f.1``)."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except OSError:
        return None


def resolve(host: str, port: int, *, resolver: Resolver | None = None) -> Address:
    """The address to connect to for ``host``: every address it resolves to must pass the
    policy (a name answering one public and one private address is refused), and the first is
    returned for the caller to connect to — so a second lookup never happens."""
    host = host.rstrip(".").lower()
    literal = literal_address(host)
    if literal is not None:
        if not _host_allowed(host):
            check_address(literal)
        return literal
    if not _host_allowed(host):
        check_url(f"http://{host}/")  # names refused whatever they resolve to
    try:
        found = (resolver or socket.getaddrinfo)(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise Refused(f"{host} does not resolve: {exc}") from None
    addresses: list[Address] = []
    for *_, sockaddr in found:
        address = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise Refused(f"{host} resolves to no address")
    if not _host_allowed(host):
        for address in addresses:
            try:
                check_address(address)
            except Refused as exc:
                raise Refused(f"{host} resolves to {exc}") from None
    return addresses[0]


def post(
    url: str,
    body: bytes,
    headers: dict[str, str],
    *,
    timeout: float,
    resolver: Resolver | None = None,
) -> int:
    """POST ``body`` to ``url`` once and return the answer's status; redirects are not
    followed (a 3xx is returned like any status). The URL and every address its name resolves
    to must pass the policy (``Refused`` otherwise), and the connection goes to the address
    checked. ``OSError`` or ``http.client.HTTPException`` when the receiver cannot be reached."""
    parts = check_url(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    address = resolve(parts.hostname or "", port, resolver=resolver)
    connection = _connection(parts, port, address, timeout)
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    try:
        connection.request("POST", target, body=body, headers=headers)
        answer = connection.getresponse()
        answer.read(65536)  # a receiver's answer is not kept; read a little so it can finish
        return int(answer.status)
    finally:
        connection.close()


def _connection(
    parts: SplitResult, port: int, address: Address, timeout: float
) -> http.client.HTTPConnection:
    """A connection to ``parts``' host (its Host header, its TLS name) whose socket opens to
    ``address``."""
    host = parts.hostname or ""
    connection: http.client.HTTPConnection
    if parts.scheme == "https":
        import ssl

        connection = http.client.HTTPSConnection(
            host, port, timeout=timeout, context=ssl.create_default_context()
        )
    else:
        connection = http.client.HTTPConnection(host, port, timeout=timeout)
    pinned = str(address)

    def open_pinned(_where: Any, *args: Any, **kwargs: Any) -> socket.socket:
        return socket.create_connection((pinned, port), *args, **kwargs)

    connection._create_connection = open_pinned  # type: ignore[attr-defined]
    return connection


def allowed_networks() -> list[Network]:
    """The CIDRs of ``RUNLEDGER_WEBHOOK_ALLOWED_NETWORKS`` (its names: ``allowed_hosts``)."""
    return [n for n in _allowed() if not isinstance(n, str)]


def allowed_hosts() -> frozenset[str]:
    return frozenset(n for n in _allowed() if isinstance(n, str))


def own_hosts() -> frozenset[str]:
    """The names this deployment answers to: ``RUNLEDGER_PUBLIC_URL``'s host and every
    ``ALLOWED_HOSTS`` entry that is a name (a wildcard ``*`` names no host)."""
    from django.conf import settings

    names = {(urlsplit(conf.RUNLEDGER_PUBLIC_URL).hostname or "").lower()}
    for entry in getattr(settings, "ALLOWED_HOSTS", []) or []:
        text = str(entry).strip().lower().lstrip(".")
        if text and text != "*":
            names.add(text.rsplit(":", 1)[0] if text.count(":") == 1 else text.strip("[]"))
    names.discard("")
    return frozenset(names)


def parse_allowed(entries: Iterable[str]) -> list[Network | str]:
    """``RUNLEDGER_WEBHOOK_ALLOWED_NETWORKS``' entries: a CIDR or an address becomes a
    network, anything else a host name; ``ValueError`` names an entry that is neither."""
    out: list[Network | str] = []
    for entry in entries:
        text = str(entry).strip().lower()
        if not text:
            continue
        try:
            out.append(ipaddress.ip_network(text, strict=False))
            continue
        except ValueError:
            pass
        if "/" in text or not all(part for part in text.rstrip(".").split(".")):
            raise ValueError(
                f"RUNLEDGER_WEBHOOK_ALLOWED_NETWORKS: {entry!r} is neither a CIDR nor a host name"
            )
        out.append(text.rstrip("."))
    return out


def _allowed() -> list[Network | str]:
    return parse_allowed(conf.RUNLEDGER_WEBHOOK_ALLOWED_NETWORKS)


def _host_allowed(host: str) -> bool:
    return host in allowed_hosts()


_HOW_TO_ALLOW = (
    "; a receiver inside the network needs its address or name in "
    "RUNLEDGER_WEBHOOK_ALLOWED_NETWORKS"
)
