"""Scenario A (and D) at a sweep of commit rates, for one or more revisions of the server in the
same sitting: p50/p95 per rate, the project's CPU per delivery (``serve``, or D's hubs and
worker together; not PostgreSQL's or Redis's), and the knee (the highest rate whose median p95
is at most 50 ms).

    python -m bench.e2e.sweep --rev before=/tmp/base/src --rev after= --rates 500,700,1000,1300
    python -m bench.e2e.sweep --scenarios A,D --rates 500,1000,1500 --runs 3

With ``--scenarios A,D`` the scenarios alternate within each rate and run like the revisions,
and the summary adds D against A: CPU per delivery at each rate, and the two knees. D's
backplane is a ``redis-server`` of the sweep's own on a free port (``--redis-url`` to use
another).

``--rev NAME=PATH`` runs the server processes with ``PYTHONPATH=PATH`` (an older checkout's
``src``); an empty path runs the installed code. Revisions alternate within each rate and run,
so that a change in the machine's load falls on all of them alike. Everything else (seeding,
clients, owners, measurement) is ``bench/e2e/scenarios.py``'s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import os
import statistics
import sys
from typing import Any

from bench._common import (
    DEFAULT_DSN,
    machine,
    parse_with_smoke,
    print_table,
    private_redis,
    server_facts,
    write_json,
)
from bench.e2e.scenarios import SCENARIOS, one_run

KNEE_P95_MS = 50.0


PROJECT = ("serve", "worker")


def project_cores(run: dict[str, Any]) -> float:
    """The project's processes' CPU in cores: ``serve``, or the hubs and the worker."""
    return sum(
        p["cpu"]
        for name, p in run["processes"].items()
        if name in PROJECT or name.startswith("hub-")
    )


def run_args(args: argparse.Namespace, path: str) -> argparse.Namespace:
    """The e2e options of one run: the sweep's, plus the revision's PYTHONPATH for the servers."""
    server_env = list(args.server_env)
    if path:
        server_env.append(f"PYTHONPATH={path}")
    return argparse.Namespace(
        seconds=args.seconds,
        dsn=args.dsn,
        redis_url=args.redis_url,
        server_env=server_env,
        logs=None,
        uvloop=False,
    )


def summarise(runs: list[dict[str, Any]]) -> dict[str, float]:
    cores = [project_cores(r) for r in runs]
    per_delivery = [
        project_cores(r) / r["deliveries_per_s"] * 1e6 for r in runs if r["deliveries_per_s"]
    ]
    return {
        "commit_rate": statistics.median(r["commit_rate"] for r in runs),
        "p50_ms": statistics.median(r["p50_ms"] for r in runs),
        "p95_ms": statistics.median(r["p95_ms"] for r in runs),
        "lost": sum(r["lost"] for r in runs),
        "project_cores": statistics.median(cores),
        "project_us_per_delivery": statistics.median(per_delivery) if per_delivery else 0.0,
        "machine_busy": statistics.median(r["machine_busy"] for r in runs),
        "other_cpu": statistics.median(r["other_cpu"] for r in runs),
    }


async def main(args: argparse.Namespace) -> int:
    with contextlib.ExitStack() as stack:
        if "D" in args.scenarios.split(",") and not args.redis_url:
            args.redis_url, _ = stack.enter_context(private_redis())
        return await sweep(args)


async def sweep(args: argparse.Namespace) -> int:
    revs = dict(item.split("=", 1) for item in args.rev) or {"installed": ""}
    scenarios = args.scenarios.split(",")
    rates = [float(r) for r in args.rates.split(",")]
    facts = {**machine(), **await server_facts(args.dsn)}
    print(f"machine: {facts}", flush=True)
    # One label per scenario and revision: "A", "D", or "A:before" with several revisions.
    labels = {
        (scen, name): scen if len(revs) == 1 else f"{scen}:{name}"
        for scen in scenarios
        for name in revs
    }
    results: dict[str, dict[float, list[dict[str, Any]]]] = {label: {} for label in labels.values()}
    loads: list[tuple[float, ...]] = []
    for rate in rates:
        for n in range(args.runs):
            order = [(scen, name, path) for scen in scenarios for name, path in revs.items()]
            if n % 2:
                order.reverse()  # alternate who goes first
            for scen, name, path in order:
                scenario = dataclasses.replace(SCENARIOS[scen], rate=rate)
                label = labels[scen, name]
                r = await one_run(args.dsn, scenario, run_args(args, path))
                r.pop("series", None)
                results[label].setdefault(rate, []).append(r)
                loads.append(os.getloadavg())
                print(
                    f"  {label} at {rate:,.0f}/s run {n + 1}: p50 {r['p50_ms']:.1f}"
                    f" p95 {r['p95_ms']:.1f} ms, project {project_cores(r):.2f}"
                    f" cores, {r['lost']} lost, busy {r['machine_busy']:.0%}"
                    f" (others {r['other_cpu']:.2f} cores)",
                    flush=True,
                )
    summary = {
        label: {rate: summarise(runs) for rate, runs in by_rate.items()}
        for label, by_rate in results.items()
    }
    keys = ["p50_ms", "p95_ms", "project_cores", "project_us_per_delivery", "machine_busy"]
    keys.append("lost")
    rows = [
        [label, rate, *(s[k] for k in keys)]
        for label, by_rate in summary.items()
        for rate, s in by_rate.items()
    ]
    print()
    print(f"scenarios {args.scenarios} sweep, medians of {args.runs} run(s)")
    print_table(["run", "commits/s", *keys], rows)
    knees = {}
    for label, by_rate in summary.items():
        within = [rate for rate, s in by_rate.items() if s["p95_ms"] <= KNEE_P95_MS]
        knees[label] = max(within, default=None)
        print(f"knee of {label} (highest rate with p95 <= {KNEE_P95_MS:g} ms): {knees[label]}")
    ratios: dict[str, dict[str, float]] = {}
    if "A" in scenarios and "D" in scenarios:
        for name in revs:
            a, d = summary[labels["A", name]], summary[labels["D", name]]
            ratios[name] = {
                str(rate): round(d[rate]["project_us_per_delivery"] / cost, 2)
                for rate in rates
                if (cost := a[rate]["project_us_per_delivery"])
            }
            print(f"project CPU per delivery, D / A ({name}), by rate: {ratios[name]}")
    print(f"load average after each run: {[round(load[0], 1) for load in loads]}")
    path = write_json(
        f"sweep-{''.join(scenarios)}",
        {
            "benchmark": "sweep",
            "scenarios": scenarios,
            "revisions": revs,
            "rates": rates,
            "args": vars(args),
            "machine": {**facts, "load_averages": loads},
            "summary": {label: {str(k): v for k, v in s.items()} for label, s in summary.items()},
            "knees": knees,
            "d_over_a_cpu_per_delivery": ratios,
            "runs": {label: {str(k): v for k, v in s.items()} for label, s in results.items()},
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
    parser.add_argument("--scenarios", default="A", help="A, D, or A,D")
    parser.add_argument("--rates", default="500,700,1000,1300", help="commits/s, comma-separated")
    parser.add_argument("--redis-url", default=None, help="scenario D's Redis (default: its own)")
    parser.add_argument("--runs", type=int, default=1, help="runs per rate and revision")
    parser.add_argument("--seconds", type=float, default=15.0, help="owner load per run")
    parser.add_argument("--dsn", default=DEFAULT_DSN, help="maintenance database URL")
    parser.add_argument("--server-env", action="append", default=[], metavar="NAME=VALUE")
    return parse_with_smoke(parser, {"scenarios": "A,D", "rates": "100", "seconds": 2.0})


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
