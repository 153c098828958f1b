"""Parts of a connection's state the hub's HTTP protocol holds (:mod:`.http_limits`): the head
cap's count and the place under a client's address. Over real connections:
tests/integration/test_http_busy_server.py, tests/chaos/test_hostile_input.py."""

from __future__ import annotations

from realtime_dispatch.edge.forwarded import TrustedProxies, parse_networks
from realtime_dispatch.edge.http_limits import ClientConnections, ClientPlace, HeadCap


def test_a_head_is_fed_whole_within_the_cap_and_cut_at_it() -> None:
    cap = HeadCap(10)
    assert cap.room(4) == 4
    assert cap.room(6) == 6  # exactly at the cap: still within
    assert cap.full
    assert cap.room(3) == 0  # the head goes on past the cap
    cap = HeadCap(10)
    assert cap.room(7) == 7
    assert cap.room(8) == 3
    assert cap.full


def test_a_body_is_not_counted_and_the_next_head_counts_from_zero() -> None:
    cap = HeadCap(10)
    cap.room(5)
    cap.fed = -1  # the head is complete: a body follows
    assert cap.room(1000) == 1000
    assert not cap.full
    cap.fed = 0  # the request is complete
    assert cap.room(11) == 10


def test_a_connection_holds_its_peers_place_until_released() -> None:
    counter = ClientConnections(1)
    first = ClientPlace(counter, TrustedProxies(()), "10.0.0.1")
    second = ClientPlace(counter, TrustedProxies(()), "10.0.0.1")
    assert first.open()
    assert not second.open()
    assert second.client() == "10.0.0.1"
    first.release()
    first.release()  # once only
    assert counter.open_from("10.0.0.1") == 0
    assert second.open()
    assert second.hand_over() == "10.0.0.1"
    assert second.address is None
    assert counter.open_from("10.0.0.1") == 1  # the upgraded connection's to free


def test_through_a_trusted_proxy_each_request_holds_its_clients_place() -> None:
    counter = ClientConnections(1)
    proxies = TrustedProxies(parse_networks(["10.0.0.0/8"]))
    place = ClientPlace(counter, proxies, "10.0.0.9")
    assert place.proxied
    assert place.open()
    assert counter.open_from("10.0.0.9") == 0
    headers = [(b"x-forwarded-for", b"203.0.113.5")]
    assert place.forwarded(headers) == ("203.0.113.5", True)
    assert place.forwarded(headers) == ("203.0.113.5", True)  # the one before it freed first
    assert counter.open_from("203.0.113.5") == 1
    other = ClientPlace(counter, proxies, "10.0.0.9")
    assert other.forwarded(headers) == ("203.0.113.5", False)
    assert other.client() == "10.0.0.9"
    place.release()
    assert counter.open_from("203.0.113.5") == 0
