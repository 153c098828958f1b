"""Scenario A at a sweep of commit rates, for one or more revisions of the server in the same
sitting: p50/p95 per rate, `serve` CPU per delivery, and the knee (the highest rate whose median
p95 is at most 50 ms).

    python bench/sweep.py --rev before=/tmp/base/src --rev after= --rates 500,700,1000,1300

``--rev NAME=PATH`` runs the server processes with ``PYTHONPATH=PATH`` (an older checkout's
``src``); an empty path runs the installed code. Revisions alternate within each rate and run,
so that a change in the machine's load falls on all of them alike. Everything else (seeding,
clients, owners, measurement) is ``bench/e2e.py``'s.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import DEFAULT_DSN, machine, print_table, server_facts, write_json
from e2e import SCENARIOS, one_run

KNEE_P95_MS = 50.0


def run_args(args: argparse.Namespace, path: str) -> argparse.Namespace:
    """The e2e options of one run: the sweep's, plus the revision's PYTHONPATH for the servers."""
    server_env = list(args.server_env)
    if path:
        server_env.append(f"PYTHONPATH={path}")
    return argparse.Namespace(
        seconds=args.seconds,
        dsn=args.dsn,
        redis_url=None,
        server_env=server_env,
        logs=None,
        uvloop=False,
    )


def summarise(runs: list[dict[str, Any]]) -> dict[str, float]:
    serve_cpu = [r["processes"]["serve"]["cpu"] for r in runs]
    per_delivery = [
        r["processes"]["serve"]["cpu"] / r["deliveries_per_s"] * 1e6
        for r in runs
        if r["deliveries_per_s"]
    ]
    return {
        "commit_rate": statistics.median(r["commit_rate"] for r in runs),
        "p50_ms": statistics.median(r["p50_ms"] for r in runs),
        "p95_ms": statistics.median(r["p95_ms"] for r in runs),
        "lost": sum(r["lost"] for r in runs),
        "serve_cores": statistics.median(serve_cpu),
        "serve_us_per_delivery": statistics.median(per_delivery) if per_delivery else 0.0,
        "machine_busy": statistics.median(r["machine_busy"] for r in runs),
        "other_cpu": statistics.median(r["other_cpu"] for r in runs),
    }


async def main(args: argparse.Namespace) -> int:
    revs = dict(item.split("=", 1) for item in args.rev) or {"installed": ""}
    rates = [float(r) for r in args.rates.split(",")]
    facts = {**machine(), **await server_facts(args.dsn)}
    print(f"machine: {facts}", flush=True)
    results: dict[str, dict[float, list[dict[str, Any]]]] = {name: {} for name in revs}
    loads: list[tuple[float, ...]] = []
    for rate in rates:
        scenario = dataclasses.replace(SCENARIOS["A"], rate=rate)
        for n in range(args.runs):
            order = list(revs.items())
            if n % 2:
                order.reverse()  # alternate who goes first
            for name, path in order:
                r = await one_run(args.dsn, scenario, run_args(args, path))
                r.pop("series", None)
                results[name].setdefault(rate, []).append(r)
                loads.append(os.getloadavg())
                print(
                    f"  {name} at {rate:,.0f}/s run {n + 1}: p50 {r['p50_ms']:.1f}"
                    f" p95 {r['p95_ms']:.1f} ms, serve {r['processes']['serve']['cpu']:.2f}"
                    f" cores, {r['lost']} lost, busy {r['machine_busy']:.0%}"
                    f" (others {r['other_cpu']:.2f} cores)",
                    flush=True,
                )
    summary = {
        name: {rate: summarise(runs) for rate, runs in by_rate.items()}
        for name, by_rate in results.items()
    }
    keys = ["p50_ms", "p95_ms", "serve_cores", "serve_us_per_delivery", "machine_busy", "lost"]
    rows = [
        [name, rate, *(s[k] for k in keys)]
        for name, by_rate in summary.items()
        for rate, s in by_rate.items()
    ]
    print()
    print(f"scenario A sweep, medians of {args.runs} run(s)")
    print_table(["revision", "commits/s", *keys], rows)
    knees = {}
    for name, by_rate in summary.items():
        within = [rate for rate, s in by_rate.items() if s["p95_ms"] <= KNEE_P95_MS]
        knees[name] = max(within, default=None)
        print(f"knee of {name} (highest rate with p95 <= {KNEE_P95_MS:g} ms): {knees[name]}")
    print(f"load average after each run: {[round(load[0], 1) for load in loads]}")
    path = write_json(
        "sweep-A",
        {
            "benchmark": "sweep",
            "revisions": revs,
            "rates": rates,
            "args": vars(args),
            "machine": {**facts, "load_averages": loads},
            "summary": {name: {str(k): v for k, v in s.items()} for name, s in summary.items()},
            "knees": knees,
            "runs": {name: {str(k): v for k, v in s.items()} for name, s in results.items()},
        },
    )
    print(f"wrote {path}")
    return 1 if any(s["lost"] for by_rate in summary.values() for s in by_rate.values()) else 0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rev",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="a revision to run: its src folder for PYTHONPATH, or empty for the installed code",
    )
    parser.add_argument("--rates", default="500,700,1000,1300", help="commits/s, comma-separated")
    parser.add_argument("--runs", type=int, default=1, help="runs per rate and revision")
    parser.add_argument("--seconds", type=float, default=15.0, help="owner load per run")
    parser.add_argument("--dsn", default=DEFAULT_DSN, help="maintenance database URL")
    parser.add_argument("--server-env", action="append", default=[], metavar="NAME=VALUE")
    return parser.parse_args()


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
