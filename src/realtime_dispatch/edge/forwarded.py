"""Who the client is behind a proxy: :class:`TrustedProxies`, pure.

For a peer in ``REALTIME_HTTP_TRUSTED_PROXIES`` (addresses or CIDRs), the client address
comes from the request's ``Forwarded`` header (RFC 7239, its ``for=`` parameters) if it has
one, else from ``X-Forwarded-For``. The list is walked from the right, past every hop that is
itself trusted: the first one that is not is the client (the entries left of it were written
by the client and prove nothing). An entry that is not an address (``unknown``, an obfuscated
identifier, garbage) ends the walk at the hop that reported it. For any other peer, and for a
trusted one that sends neither header, the client is the peer.

Because ``Forwarded`` wins when present, a proxy that only writes ``X-Forwarded-For`` must
drop a ``Forwarded`` header the client sent (nginx: ``proxy_set_header Forwarded "";``), and
the other way round; docs/deploy.md shows it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def parse_networks(values: Iterable[str]) -> tuple[IPNetwork, ...]:
    """``values`` (addresses or CIDRs) as networks; ``ValueError`` names the first bad one."""
    networks: list[IPNetwork] = []
    for value in values:
        try:
            networks.append(ipaddress.ip_network(value.strip(), strict=False))
        except ValueError:
            raise ValueError(f"{value.strip()!r} is not an IP address or CIDR") from None
    return tuple(networks)


def _address(text: str) -> IPAddress | None:
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _forwarded_node(value: str) -> str:
    """The address part of a ``for=`` value: unquoted, without brackets or port."""
    node = value.strip().strip('"')
    if node.startswith("["):  # "[2001:db8::1]:4711"
        return node[1:].partition("]")[0]
    if node.count(":") == 1:  # 192.0.2.1:4711
        return node.partition(":")[0]
    return node


def forwarded_for(values: Sequence[str]) -> list[str]:
    """The ``for=`` nodes of ``Forwarded`` header values, in order (an element without one
    counts as ``unknown``)."""
    nodes: list[str] = []
    for value in values:
        for element in value.split(","):
            node = "unknown"
            for pair in element.split(";"):
                key, _, part = pair.partition("=")
                if key.strip().lower() == "for":
                    node = _forwarded_node(part)
            nodes.append(node)
    return nodes


def x_forwarded_for(values: Sequence[str]) -> list[str]:
    return [_forwarded_node(part) for value in values for part in value.split(",")]


class TrustedProxies:
    """The proxies whose forwarding headers are believed."""

    __slots__ = ("_networks", "_verdicts")

    MAX_CACHED = 4096

    def __init__(self, networks: Sequence[IPNetwork]) -> None:
        self._networks = tuple(networks)
        self._verdicts: dict[str, bool] = {}
        """Peer address → trusted, for the peers seen (bounded): parsed once, not per request."""

    def __bool__(self) -> bool:
        return bool(self._networks)

    def trusts(self, address: str) -> bool:
        verdict = self._verdicts.get(address)
        if verdict is None:
            parsed = _address(address)
            verdict = parsed is not None and self._trusted(parsed)
            if len(self._verdicts) >= self.MAX_CACHED:
                self._verdicts.clear()
            self._verdicts[address] = verdict
        return verdict

    def _trusted(self, address: IPAddress) -> bool:
        return any(address in network for network in self._networks)

    def client(self, peer: str, headers: Iterable[tuple[bytes, bytes]]) -> str:
        """The client address of a request from ``peer`` with these (lower-cased) headers."""
        if not self.trusts(peer):
            return peer
        forwarded: list[str] = []
        xff: list[str] = []
        for name, value in headers:
            if name == b"forwarded":
                forwarded.append(value.decode("latin-1"))
            elif name == b"x-forwarded-for":
                xff.append(value.decode("latin-1"))
        hops = forwarded_for(forwarded) if forwarded else x_forwarded_for(xff)
        client = peer
        for hop in reversed(hops):
            address = _address(hop)
            if address is None:
                return client  # the hop that reported it is as far as we can see
            client = str(address)
            if not self._trusted(address):
                return client
        return client
