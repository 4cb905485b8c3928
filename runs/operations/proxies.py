"""The client's address behind a proxy: one rule for ``/metrics``' allow-list, sign-in
throttling (django-axes) and the logs.

A forwarded header (``X-Forwarded-For`` by default, ``RUNLEDGER_CLIENT_ADDRESS_HEADER``) is
honoured only when the request comes from a proxy named in ``RUNLEDGER_TRUSTED_PROXIES``; then
the client is the right-most address in it that is not itself a trusted proxy (the left-most
entries are whatever the client chose to send). From anyone else the header is ignored and the
client is the connection's own address (``REMOTE_ADDR``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from typing import Any

from django.conf import settings
from django.http import HttpRequest

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def parse_networks(values: Sequence[str], *, name: str) -> list[Network]:
    """``127.0.0.1``, ``10.0.0.0/8``, ``::1`` as networks; a clear error naming the setting."""
    networks = []
    for value in values:
        try:
            networks.append(ipaddress.ip_network(value.strip(), strict=False))
        except ValueError as exc:
            raise ValueError(f"{name}: {value!r} is not an address or a network ({exc})") from exc
    return networks


def _address(text: str) -> Address | None:
    try:
        return ipaddress.ip_address(text.strip())
    except ValueError:
        return None


def _trusted(address: Address | None, proxies: Sequence[Network]) -> bool:
    return address is not None and any(address in net for net in proxies)


def client_address(meta: Mapping[str, Any]) -> str | None:
    """The client's address for a request's ``META`` (a WSGI environ), as text; None when the
    connection's own address is not an address (a unix socket)."""
    proxies: Sequence[Network] = settings.RUNLEDGER_TRUSTED_PROXIES
    peer = _address(str(meta.get("REMOTE_ADDR", "")))
    if not _trusted(peer, proxies):
        return str(peer) if peer is not None else None
    forwarded = str(meta.get(settings.RUNLEDGER_CLIENT_ADDRESS_META, ""))
    for hop in reversed([h for h in forwarded.split(",") if h.strip()]):
        address = _address(hop)
        if address is None:
            return str(peer)  # a garbled header: the proxy is the last address we can vouch for
        if not _trusted(address, proxies):
            return str(address)
    return str(peer)


def client_ip(request: HttpRequest) -> str | None:
    """django-axes' ``AXES_CLIENT_IP_CALLABLE``: lock-outs count by the real client."""
    return client_address(request.META)
