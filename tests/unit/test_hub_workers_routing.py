"""``--workers N``: the count, and what the parent reads of a connection's first request to
choose its worker (``realtime_dispatch.cli.workers``)."""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path

import pytest

from realtime_dispatch.cli.workers import (
    Parent,
    merged_metrics,
    request_target,
    unverified_user,
    user_worker,
)
from realtime_dispatch.errors import ConfigurationError
from realtime_dispatch.hub.transports.negotiate import NegotiationStore, worker_of, worker_prefix
from realtime_dispatch.settings import load_settings, parse_workers
from support.hub_wire import make_token


def test_worker_count_is_a_number_or_the_cpus_this_process_may_use() -> None:
    assert parse_workers("1") == 1
    assert parse_workers(" 4 ") == 4
    assert parse_workers("AUTO") == len(os.sched_getaffinity(0))
    for bad in ("0", "-1", "two", "1.5", "257", ""):
        with pytest.raises(ValueError, match="auto or a whole number"):
            parse_workers(bad)


def test_an_invalid_worker_count_names_the_variable() -> None:
    with pytest.raises(ConfigurationError) as info:
        load_settings(hub_workers="lots")
    assert info.value.variable == "REALTIME_HUB_WORKERS"
    assert load_settings().worker_count() == 1


def test_a_workers_negotiations_name_it() -> None:
    store = NegotiationStore(60.0, prefix=worker_prefix(3))
    negotiation = store.create("user", stateful=False, now=0.0)
    assert negotiation.token.startswith("w3.")
    assert negotiation.connection_id.startswith("w3.")
    assert worker_of(negotiation.token) == worker_of(negotiation.connection_id) == 3
    assert store.claim(negotiation.token, "user", now=1.0) == negotiation
    plain = NegotiationStore(60.0).create("user", stateful=False, now=0.0)
    assert worker_prefix(None) == ""
    assert worker_of(plain.token) is None
    for other in ("w.x", "wx.y", "3.x", "w3", ""):
        assert worker_of(other) is None


def test_the_parent_routes_by_the_connection_id_then_by_the_user() -> None:
    user = uuid.uuid4()
    token = make_token(user)
    target = request_target(b"GET /hubs/messenger?id=w1.abc HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (target.method, target.path, target.named, target.user) == (
        b"GET",
        b"/hubs/messenger",
        1,
        None,
    )
    header = f"POST /hubs/messenger/negotiate HTTP/1.1\r\nAuthorization: Bearer {token}\r\n\r\n"
    assert request_target(header.encode()).user == str(user)
    query = f"GET /hubs/messenger?id=w0.x%2Dy&access_token={token} HTTP/1.1\r\n\r\n"
    target = request_target(query.encode())
    assert (target.named, target.user) == (0, str(user))
    # A header after the blank line is a body, not a header.
    body = f"POST /x HTTP/1.1\r\nHost: x\r\n\r\nAuthorization: Bearer {token}\r\n"
    assert request_target(body.encode()).user is None
    assert request_target(b"garbage").method == b""


def test_the_user_is_read_unverified_and_only_from_a_jwt() -> None:
    user = uuid.uuid4()
    forged = make_token(user, secret="someone else's secret, 32 bytes long")
    assert unverified_user(forged, "sub") == str(user)
    assert unverified_user(make_token(user, uid=7), "uid") == "7"
    assert unverified_user(make_token(user), "uid") is None
    for token in ("service-key", "a.b.c", "a.!!!.c", None):
        assert unverified_user(token, "sub") is None


def test_users_spread_over_the_workers_the_same_way_in_every_process() -> None:
    users = [str(uuid.uuid4()) for _ in range(400)]
    counts = [0, 0]
    for user in users:
        counts[user_worker(user, 2)] += 1
        assert user_worker(user, 2) == user_worker(user, 2)
    assert min(counts) > 120  # both get a share
    assert user_worker("00000000-0000-0000-0000-000000000001", 2) == 1  # a CRC-32, fixed


def test_the_replicas_metrics_label_each_workers_samples() -> None:
    page = (
        b'# HELP hub_open Open connections.\n# TYPE hub_open gauge\nhub_open{state="a"} 2.0\n'
        b"# HELP hub_sent_total Frames.\n# TYPE hub_sent_total counter\nhub_sent_total 5.0\n"
    )
    merged = merged_metrics([(0, page), (1, page.replace(b"2.0", b"3.0"))]).decode()
    assert merged.count("# TYPE hub_open gauge") == 1
    assert 'hub_open{state="a",worker="0"} 2.0' in merged
    assert 'hub_open{state="a",worker="1"} 3.0' in merged
    assert 'hub_sent_total{worker="1"} 5.0' in merged


def test_the_replica_is_ready_once_every_worker_was_then_while_any_is() -> None:
    with socket.socket() as listener:
        parent = Parent(listener, [], {}, 2, Path("/nonexistent"))
        first, second = parent.workers
        assert not parent.is_ready()
        first.ready = True
        assert not parent.is_ready()  # starting: not before every worker is ready
        second.ready = True
        assert parent.is_ready()
        second.ready = False  # worker 1 restarts: worker 0 serves meanwhile
        assert parent.is_ready()
        first.ready = False
        assert not parent.is_ready()
        first.ready = second.ready = True
        parent.stopping.set()
        assert not parent.is_ready()
