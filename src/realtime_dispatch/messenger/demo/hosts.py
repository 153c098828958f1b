"""Which ``Host`` headers the demo token endpoint answers: :func:`served_host`.

A DNS-rebinding page reaches a local server under the attacker's own domain name, so the endpoint
that hands out tokens answers only requests addressed to this server by an IP literal,
``localhost``, or the host name it was started with, on the port it serves."""

from __future__ import annotations

import ipaddress

LOCAL_NAMES = frozenset({"localhost"})


def _split(host_header: str) -> tuple[str, int | None] | None:
    """``(name, port)`` of a Host header (``[::1]:8000``, ``a.b:80``, ``a.b``), or None."""
    value = host_header.strip().lower()
    if value.startswith("["):
        name, sep, rest = value[1:].partition("]")
        if not sep:
            return None
        port_text = rest.removeprefix(":") if rest.startswith(":") else None
        if rest and port_text is None:
            return None
    else:
        name, sep, port_text_raw = value.rpartition(":")
        if not sep:
            name, port_text_raw = value, ""
        port_text = port_text_raw if sep else None
    if not name:
        return None
    if port_text is None:
        return name, None
    if not port_text.isdigit():
        return None
    return name, int(port_text)


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def served_host(host_header: str | None, *, bound_host: str, port: int) -> bool:
    """Whether ``host_header`` names this server: an IP literal, ``localhost`` or
    ``bound_host``, with ``port`` (or no port when ``port`` is 80)."""
    if host_header is None:
        return False
    parts = _split(host_header)
    if parts is None:
        return False
    name, given_port = parts
    if (given_port if given_port is not None else 80) != port:
        return False
    return _is_ip(name) or name in LOCAL_NAMES or name == bound_host.lower().strip("[]")
