"""Operator commands: ``stats --watch``, ``quarantined``, ``lock``, ``revoke``."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

import asyncpg
import orjson
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from realtime_dispatch.cli.database import database_url, transaction_pooled
from realtime_dispatch.cli.exit_codes import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from realtime_dispatch.database.connections import create_pool
from realtime_dispatch.ops.service import LockHolder, OpsService, RecentLag
from realtime_dispatch.outbox.store import OutboxStats
from realtime_dispatch.settings import Settings
from realtime_dispatch.values.keys import Key


def _seconds(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.1f} s"


def render_watch(stats: OutboxStats, lag: RecentLag, holder: LockHolder | None) -> Group:
    """The ``stats --watch`` screen."""
    table = Table(title="realtime-dispatch", title_justify="left", expand=False)
    columns = ("pending", "quarantined", "done", "target gone", "oldest pending", "lag p50")
    for column in (*columns, "lag p95"):
        table.add_column(column, justify="right")
    table.add_row(
        str(stats.pending),
        Text(str(stats.quarantined), style="bold red" if stats.quarantined else "green"),
        str(stats.done),
        str(stats.target_gone),
        _seconds(stats.oldest_pending_age_seconds),
        _seconds(lag.p50),
        Text(_seconds(lag.p95), style="bold red" if (lag.p95 or 0) > 1 else ""),
    )
    lock = (
        f"lock: pid {holder.pid} ({holder.application_name or '?'})"
        if holder
        else "lock: free (between passes, or no dispatcher running)"
    )
    return Group(table, Text(lock, style="dim"), Text("Ctrl-C to leave", style="dim"))


def _line(stats: OutboxStats, lag: RecentLag, holder: LockHolder | None) -> str:
    return orjson.dumps(
        {
            "at": round(time.time(), 3),
            **stats.as_json(),
            "lag": lag.as_json(),
            "lockHolder": holder.as_json() if holder else None,
        }
    ).decode()


async def watch_stats(settings: Settings, interval: float = 1.0) -> int:
    """Refresh every ``interval`` until Ctrl-C/SIGTERM: a live table on a terminal, one JSON line
    per refresh otherwise (for logs and pipes)."""
    console = Console()
    async with database_url(settings) as url:
        pool = await create_pool(url, max_size=1, pooled=transaction_pooled(settings))
        try:
            service = OpsService(pool)
            if console.is_terminal:
                with Live(console=console, auto_refresh=False) as live:
                    while True:
                        frame = await _sample(service)
                        live.update(render_watch(*frame), refresh=True)
                        await asyncio.sleep(interval)
            while True:
                print(_line(*await _sample(service)), flush=True)
                await asyncio.sleep(interval)
        except asyncio.CancelledError:
            return EXIT_OK
        finally:
            await pool.close()


async def _sample(service: OpsService) -> tuple[OutboxStats, RecentLag, LockHolder | None]:
    return await service.stats(), await service.recent_lag(), await service.lock_holder()


async def quarantined(settings: Settings, args: argparse.Namespace) -> int:
    async with database_url(settings) as url:
        pool = await create_pool(url, max_size=1, pooled=transaction_pooled(settings))
        try:
            rows = await OpsService(pool).quarantined(kind=args.kind, limit=args.limit)
        finally:
            await pool.close()
    if args.json:
        print(orjson.dumps([row.as_json() for row in rows]).decode())
        return EXIT_OK
    if not rows:
        print("no quarantined rows")
        return EXIT_OK
    table = Table(box=None, pad_edge=False)
    for column in ("id", "kind", "attempts", "updated", "last_error"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(
            str(row.id),
            row.kind,
            str(row.attempts),
            row.updated_at.strftime("%Y-%m-%d %H:%M:%S"),
            row.last_error or "",
        )
    Console(width=200 if not sys.stdout.isatty() else None).print(table)
    return EXIT_OK


async def lock(settings: Settings, args: argparse.Namespace) -> int:
    async with database_url(settings) as url:
        pool = await create_pool(url, max_size=1, pooled=transaction_pooled(settings))
        try:
            holder = await OpsService(pool).lock_holder()
        finally:
            await pool.close()
    if args.json:
        print(orjson.dumps(holder.as_json() if holder else None).decode())
    elif holder is None:
        print("free: no pass is running (or no dispatcher is connected)")
    else:
        since = holder.backend_start.strftime("%Y-%m-%d %H:%M:%S")
        where = holder.client_addr or "local socket"
        print(
            f"held by pid {holder.pid} ({holder.application_name or '?'}, {where}, since {since})"
        )
    return EXIT_OK


def user_key(settings: Settings, value: str) -> Key | None:
    """A user's key from the command line, of ``REALTIME_KEY_TYPE`` (a UUID in any spelling, a
    decimal integer or a string); None when it is not one."""
    try:
        return settings.keys().from_json(value)
    except ValueError:
        return None


async def revoke(settings: Settings, args: argparse.Namespace) -> int:
    """``revoke --user KEY`` / ``--lift KEY`` / ``--list``: every hub replica applies a
    change within moments (``NOTIFY realtime_revocation``)."""
    given = args.user if args.user is not None else args.lift
    user = None if given is None else user_key(settings, given)
    if given is not None and user is None:
        print(
            f"realtime-dispatch: {given!r} is not a key of REALTIME_KEY_TYPE={settings.key_type}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    keys = settings.keys()
    async with database_url(settings) as url:
        pool = await create_pool(url, max_size=1)
        try:
            service = OpsService(pool)
            if args.list:
                items = await service.revocations()
            elif args.user is not None:
                assert user is not None
                items = [await service.revoke(user)]
            else:
                assert user is not None
                lifted = await service.lift_revocation(user)
                if lifted is None:
                    print(f"realtime-dispatch: no revocation for user {args.lift}", file=sys.stderr)
                    return EXIT_FAILURE
                items = [lifted]
        except asyncpg.UndefinedTableError:
            print("realtime-dispatch: run `realtime-dispatch migrate` first", file=sys.stderr)
            return EXIT_FAILURE
        finally:
            await pool.close()
    if args.json:
        print(orjson.dumps([item.as_json_with(keys) for item in items]).decode())
    elif args.list:
        if not items:
            print("no revocations")
        for item in items:
            print(f"{item.user_id}  revoked at {item.revoked_at.isoformat()}")
    elif args.user is not None:
        print(
            f"revoked {args.user}: tokens issued before {items[0].revoked_at.isoformat()} refused"
        )
    else:
        print(f"lifted the revocation of {args.lift}")
    return EXIT_OK
