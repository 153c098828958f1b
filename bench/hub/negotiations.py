"""The negotiation store's memory at its bound, one command:

    python -m bench.hub.negotiations [--total 10000] [--per-address 1000] [--smoke]

Fills a :class:`~realtime_dispatch.hub.transports.negotiate.NegotiationStore` to ``--total`` the
way the
issue's flood did (201 accounts × 50 negotiations, from 201 addresses), then 10,000 more past
it (each pushes out the oldest), and prints the bytes the store holds (``tracemalloc``) at the
bound and per negotiation, and the time per ``create`` past the bound.
"""

from __future__ import annotations

import argparse
import json
import time
import tracemalloc
from uuid import uuid4

from bench._common import parse_with_smoke
from realtime_dispatch.hub.transports.negotiate import NegotiationStore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--total", type=int, default=10_000)
    parser.add_argument("--per-address", type=int, default=1000)
    args = parse_with_smoke(parser, {"total": 500, "per_address": 50})
    users = [uuid4() for _ in range(201)]
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    store = NegotiationStore(60, per_user=50, per_address=args.per_address, total=args.total)
    evicted = 0

    def count() -> None:
        nonlocal evicted
        evicted += 1

    store.on_evicted = count
    n = 0
    while len(store) < args.total:
        user = users[n % len(users)]
        store.create(user, stateful=False, now=0, address=f"198.51.{n % 201}.1")
        n += 1
    at_bound = tracemalloc.get_traced_memory()[0] - base
    started = time.perf_counter()
    for m in range(10_000):
        store.create(users[m % len(users)], stateful=False, now=1, address=f"203.0.{m % 250}.1")
    per_create = (time.perf_counter() - started) / 10_000
    after = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    print(
        json.dumps(
            {
                "total": args.total,
                "bytes_at_bound": at_bound,
                "bytes_per_negotiation": round(at_bound / args.total),
                "bytes_after_10000_more": after,
                "evicted": evicted,
                "us_per_create_past_bound": round(per_create * 1e6, 2),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
