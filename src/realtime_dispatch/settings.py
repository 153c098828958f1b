"""Settings: read from the environment once, at the edge, then passed down as frozen values.

:class:`Settings` is the only place that touches ``os.environ`` (through pydantic-settings, prefix
``REALTIME_``). Everything below takes the typed value objects it builds, such as
:class:`~realtime_dispatch.dispatch.options.RealtimeDispatchOptions`; each options class lives with
the component it configures. Tests build those objects directly.

An invalid value raises :class:`~realtime_dispatch.errors.ConfigurationError` naming the variable;
the CLI turns that into one line on stderr and exit code 2.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import fields
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, ValidationError, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from realtime_dispatch.auth.media import MediaOptions
from realtime_dispatch.auth.tokens import TokenOptions
from realtime_dispatch.dispatch.options import RealtimeDispatchOptions
from realtime_dispatch.edge.forwarded import IPNetwork, parse_networks
from realtime_dispatch.errors import ConfigurationError
from realtime_dispatch.manifest.manifest import Manifest, load_manifest
from realtime_dispatch.messenger.api.app import ApiOptions
from realtime_dispatch.messenger.api.send_rate import SendRate
from realtime_dispatch.messenger.jobs.call_reaper import CallReaperOptions
from realtime_dispatch.messenger.jobs.options import (
    CONFERENCE_EMPTY_TIMEOUT_SECONDS,
    CONFERENCE_MAX_DURATION_SECONDS,
    JOB_BATCH_SIZE,
    JOB_PAUSE_FACTOR,
    RECORDING_FINALIZE_MAX_ATTEMPTS,
    RECORDING_FINALIZE_TIMEOUT_SECONDS,
    ConferenceReaperOptions,
    JobSchedule,
    RecordingFinalizeOptions,
    status_url_problem,
)
from realtime_dispatch.sync.service import SyncOptions, default_concurrency
from realtime_dispatch.values.bounds import PG_MILLISECONDS_MAX, TIMESTAMP_SPAN_MAX
from realtime_dispatch.values.keys import KeyCodec, key_codec

ENV_PREFIX = "REALTIME_"
FINGERPRINT_KEY_LABEL = b"realtime-dispatch message fingerprint key v1"


def _split_csv(value: Any) -> Any:
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    return value


class Settings(BaseSettings):
    """Every ``REALTIME_*`` variable. Build it with :func:`load_settings`."""

    # ``allow_inf_nan=False``: every duration, rate and interval is a finite number; ``inf``
    # would pass a ``> 0`` check and then overflow deep inside the worker.
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        extra="ignore",
        frozen=True,
        hide_input_in_errors=True,
        allow_inf_nan=False,
    )

    database_url: SecretStr | None = None
    database_session_url: SecretStr | None = None
    """LISTEN, advisory locks, the membership feed: a direct connection when the pools go
    through a transaction pooler. Unset: ``database_url``."""
    data_dir: Path | None = None
    projections: Path | None = None
    """The projection manifest (``REALTIME_PROJECTIONS``). Set: the adopter's own schema, and
    nothing of the reference messenger is created or run. Unset: the shipped manifest."""
    key_type: Literal["uuid", "bigint", "text"] = "uuid"
    """The type of the owner's keys (``REALTIME_KEY_TYPE``): the outbox's key columns, the
    manifest's parameters and id columns, the tokens' user claim, groups and payload ids."""
    log_level: str = "info"
    dev: bool = False
    """Development mode with ``REALTIME_DATABASE_URL``: generated secrets and demo tokens when
    ``REALTIME_HUB_JWT_SECRET`` is unset (the embedded default is development mode anyway)."""

    dispatch_polling_interval: float = 1.0
    dispatch_batch_size: int = 200
    dispatch_max_run_duration: float = 5.0
    dispatch_max_attempts: int = 8
    dispatch_backoff_base: float = 2.0
    dispatch_backoff_factor: float = 2.0
    dispatch_backoff_cap: float = 120.0
    dispatch_lock_ttl: float = 30.0
    dispatch_retention_done: float = 86_400.0
    dispatch_listen: bool = True
    dispatch_linger: float = 0.003
    dispatch_partitions: int = 1

    # ``worker``'s own /metrics, /healthz, /readyz (``--host``/``--port`` win); no port, none.
    worker_host: str = "127.0.0.1"
    worker_port: int | None = Field(default=None, ge=1, le=65535)

    backplane_enabled: bool = False
    backplane: Literal["none", "redis", "redis-cluster"] | None = None
    """Unset: ``redis`` when ``backplane_enabled``, else ``none``."""
    redis_url: SecretStr | None = None
    hub_jwt_secret: SecretStr | None = None
    hub_jwt_jwks_url: str | None = None
    """An identity provider's JSON Web Key Set (RS256 / ES256 tokens), https (or http to a
    loopback address); needs the issuer and the audience."""
    hub_jwt_issuer: str | None = None
    hub_jwt_audience: str | None = None
    hub_jwt_user_claim: str = "sub"
    hub_url: str | None = None
    hub_service_key: SecretStr | None = None
    hub_ping_interval: float = Field(default=15.0, gt=0)
    hub_idle_timeout: float = Field(default=30.0, gt=0)
    hub_max_connections_per_user: int = Field(default=50, ge=1)
    hub_typing_interval: float = Field(
        default=2.0, gt=0, le=TIMESTAMP_SPAN_MAX, allow_inf_nan=False
    )
    hub_presence_watch_limit: int = Field(default=500, ge=1, le=100_000)
    """Users one connection may watch (``WatchPresence``); past it the invocation fails."""
    hub_presence_grace: float = Field(default=5.0, ge=0, le=3600, allow_inf_nan=False)
    """Seconds a user stays online after their last connection closed."""
    hub_workers: str = "1"
    """Hub processes of ``hub`` / ``serve`` sharing one port (``REALTIME_HUB_WORKERS``): a
    whole number from 1, or ``auto`` (the CPUs this process may run on). :meth:`worker_count`."""

    # Durations that become timestamps are at most TIMESTAMP_SPAN_MAX (ten years), those handed
    # to PostgreSQL in milliseconds at most PG_MILLISECONDS_MAX (bounds.py).

    # The HTTP server's limits against slow or greedy clients (``serve`` / ``hub``).
    http_header_timeout: float = Field(default=10.0, gt=0)
    http_body_timeout: float = Field(default=15.0, gt=0)
    http_max_connections_per_client: int = Field(default=1000, ge=0)
    """Open connections from one client address; 0 turns the cap off. Behind a proxy listed
    in ``http_trusted_proxies`` the address is the one it forwards."""
    http_max_header_bytes: int = Field(default=16 * 1024, ge=1024, le=1024 * 1024)
    """The request line and headers of one request; past it 431 and the connection ends."""
    http_trusted_proxies: Annotated[tuple[str, ...], NoDecode] = ()
    """Addresses or CIDRs of proxies whose ``Forwarded`` / ``X-Forwarded-For`` is believed."""
    # GET /api/sync: rows examined per page, the page's statement timeout, pages of one user at
    # once, and the connections of its own pool (so that it never takes the others').
    sync_scan_limit: int = Field(default=10_000, ge=1000)
    sync_statement_timeout: float = Field(
        default=2.0, gt=0, le=PG_MILLISECONDS_MAX, allow_inf_nan=False
    )
    sync_max_per_user: int = Field(default=2, ge=1)
    sync_pool_size: int = Field(default=2, ge=1)
    sync_max_concurrent: int = Field(default_factory=default_concurrency, ge=1)
    """Sync pages of anyone running at once in one process (the others wait their turn within
    ``sync_queue_timeout``); by default half the machine's cores, at least 1."""
    sync_queue_timeout: float = Field(default=30.0, gt=0, allow_inf_nan=False)
    """Seconds a sync page may wait for its turn among ``sync_max_concurrent`` (then 503)."""
    # Message sends and edits per user (REST), per replica: a token bucket.
    api_send_rate: float = Field(default=10.0, gt=0, allow_inf_nan=False)
    api_send_burst: int = Field(default=30, ge=1)
    message_fingerprint_secret: SecretStr | None = None
    """Key of the idempotency fingerprints; unset: derived from ``REALTIME_HUB_JWT_SECRET``."""

    media_jitsi_app_id: str = "realtime-dispatch"
    media_jitsi_app_secret: SecretStr | None = None
    media_jitsi_domain: str = "meet.local"
    media_turn_urls: Annotated[tuple[str, ...], NoDecode] = ()
    media_turn_secret: SecretStr | None = None
    media_token_ttl: float = Field(default=120.0, gt=0, le=TIMESTAMP_SPAN_MAX)

    # The call-timeout reaper (``serve`` / ``hub``): a ringing call becomes Missed after the ring
    # timeout; an answered call still Active after the maximum duration becomes Ended.
    call_ring_timeout: float = Field(default=45.0, gt=0, le=TIMESTAMP_SPAN_MAX)
    call_max_duration: float = Field(default=4 * 3600.0, gt=0, le=TIMESTAMP_SPAN_MAX)

    # The media lifecycle jobs (beside the call-timeout reaper): the conference-room reaper and
    # the recording-finalize retry (which also uses REALTIME_DISPATCH_BACKOFF_*, _LOCK_TTL and
    # _MAX_RUN_DURATION).
    media_jobs_batch_size: int = Field(default=JOB_BATCH_SIZE, ge=1)
    media_jobs_pause_factor: float = Field(default=JOB_PAUSE_FACTOR, ge=0, allow_inf_nan=False)
    conference_empty_timeout: float = Field(
        default=CONFERENCE_EMPTY_TIMEOUT_SECONDS, gt=0, le=TIMESTAMP_SPAN_MAX, allow_inf_nan=False
    )
    conference_max_duration: float = Field(
        default=CONFERENCE_MAX_DURATION_SECONDS, gt=0, le=TIMESTAMP_SPAN_MAX, allow_inf_nan=False
    )
    media_recording_status_url: str | None = None
    """The media pipeline's recording status service: ``GET {url}/{recordingId}``."""
    recording_finalize_max_attempts: int = Field(default=RECORDING_FINALIZE_MAX_ATTEMPTS, ge=1)
    recording_finalize_timeout: float = Field(
        default=RECORDING_FINALIZE_TIMEOUT_SECONDS, gt=0, le=TIMESTAMP_SPAN_MAX, allow_inf_nan=False
    )

    @model_validator(mode="before")
    @classmethod
    def _csv_lists(cls, data: Any) -> Any:
        for name in ("media_turn_urls", "http_trusted_proxies"):
            if isinstance(data, dict) and name in data:
                data = {**data, name: _split_csv(data[name])}
        if isinstance(data, dict) and data.get("projections") == "":
            data = {**data, "projections": None}  # set but empty: unset
        if isinstance(data, dict) and data.get("media_recording_status_url") == "":
            data = {**data, "media_recording_status_url": None}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        if self.log_level.lower() not in {"debug", "info", "warning", "error"}:
            raise ValueError("log_level: must be one of debug, info, warning, error")
        if self.call_max_duration <= self.call_ring_timeout:
            raise ValueError("call_max_duration: must be above REALTIME_CALL_RING_TIMEOUT")
        url = self.media_recording_status_url
        if url is not None and (problem := status_url_problem(url)) is not None:
            raise ValueError(f"media_recording_status_url: {problem}")
        try:
            parse_workers(self.hub_workers)
        except ValueError as exc:
            raise ValueError(f"hub_workers: {exc}") from None
        if self.backplane_enabled and self.backplane == "none":
            raise ValueError("backplane: none contradicts REALTIME_BACKPLANE_ENABLED=true")
        if self.backplane_mode != "none" and self.redis_url is None:
            raise ValueError(f"redis_url: required by the {self.backplane_mode} backplane")
        self._check_token_settings()
        try:
            self.trusted_proxy_networks()
        except ValueError as exc:
            raise ValueError(f"http_trusted_proxies: {exc}") from None
        return self

    def worker_count(self) -> int:
        """``REALTIME_HUB_WORKERS`` as a number (``auto``: the CPUs this process may use)."""
        return parse_workers(self.hub_workers)

    def trusted_proxy_networks(self) -> tuple[IPNetwork, ...]:
        return parse_networks(self.http_trusted_proxies)

    def _check_token_settings(self) -> None:
        claim = self.hub_jwt_user_claim
        if not claim or not claim.isprintable() or any(c.isspace() for c in claim):
            raise ValueError("hub_jwt_user_claim: must be a claim name (no spaces)")
        for name in ("hub_jwt_issuer", "hub_jwt_audience"):
            if getattr(self, name) == "":
                raise ValueError(f"{name}: must not be empty (unset it instead)")
        url = self.hub_jwt_jwks_url
        if url is None:
            return
        problem = jwks_url_problem(url)
        if problem is not None:
            raise ValueError(f"hub_jwt_jwks_url: {problem}")
        for name in ("hub_jwt_issuer", "hub_jwt_audience"):
            if getattr(self, name) is None:
                raise ValueError(f"{name}: required with REALTIME_HUB_JWT_JWKS_URL")

    def keys(self) -> KeyCodec:
        """The codec of ``REALTIME_KEY_TYPE``."""
        return key_codec(self.key_type)

    def token_options(self) -> TokenOptions:
        """Which hub/REST tokens are accepted (``REALTIME_HUB_JWT_*``)."""
        secret = self.hub_jwt_secret
        return TokenOptions(
            keys=self.keys(),
            secret=secret.get_secret_value() if secret is not None else None,
            jwks_url=self.hub_jwt_jwks_url,
            issuer=self.hub_jwt_issuer,
            audience=self.hub_jwt_audience,
            user_claim=self.hub_jwt_user_claim,
        )

    @property
    def backplane_mode(self) -> Literal["none", "redis", "redis-cluster"]:
        if self.backplane is not None:
            return self.backplane
        return "redis" if self.backplane_enabled else "none"

    @property
    def reference_messenger(self) -> bool:
        """Whether the reference messenger is this deployment's owner service (no manifest set):
        its tables are migrated, its REST API, demo page, call reaper and media lifecycle jobs
        run."""
        return self.projections is None

    def projection_manifest(self) -> Manifest:
        """The manifest's queries (the shipped one when unset); ConfigurationError naming
        ``REALTIME_PROJECTIONS`` when the file cannot be read or parsed."""
        return load_manifest(self.projections)

    def dispatch_options(self) -> RealtimeDispatchOptions:
        return RealtimeDispatchOptions(**self._prefixed("dispatch_", RealtimeDispatchOptions))

    def job_schedule(self) -> JobSchedule:
        """The media lifecycle jobs' lease and run length (the dispatcher's), and their pace."""
        return JobSchedule(
            lock_ttl=self.dispatch_lock_ttl,
            max_run_duration=self.dispatch_max_run_duration,
            batch_size=self.media_jobs_batch_size,
            pause=self.media_jobs_pause_factor,
        )

    def call_reaper_options(self) -> CallReaperOptions:
        return CallReaperOptions(**self._prefixed("call_", CallReaperOptions))

    def conference_reaper_options(self) -> ConferenceReaperOptions:
        return ConferenceReaperOptions(**self._prefixed("conference_", ConferenceReaperOptions))

    def recording_finalize_options(self) -> RecordingFinalizeOptions:
        return RecordingFinalizeOptions(
            status_url=self.media_recording_status_url,
            max_attempts=self.recording_finalize_max_attempts,
            timeout=self.recording_finalize_timeout,
            backoff=self.dispatch_options().backoff,
        )

    def api_options(self) -> ApiOptions:
        secret = self.hub_jwt_secret
        return ApiOptions(
            jwt_secret=secret.get_secret_value() if secret is not None else None,
            media=self.media_options(),
            fingerprint_key=self.fingerprint_key(),
            send_rate=SendRate(self.api_send_rate, self.api_send_burst),
        )

    def sync_options(self) -> SyncOptions:
        return SyncOptions(**self._prefixed("sync_", SyncOptions))

    def fingerprint_key(self) -> bytes | None:
        """The key of the idempotency fingerprints: ``REALTIME_MESSAGE_FINGERPRINT_SECRET``, or
        one derived from ``REALTIME_HUB_JWT_SECRET`` (an HMAC of a fixed label under it, so the
        fingerprints never reveal the JWT secret); None without either."""
        if self.message_fingerprint_secret is not None:
            return self.message_fingerprint_secret.get_secret_value().encode()
        if self.hub_jwt_secret is None:
            return None
        jwt_secret = self.hub_jwt_secret.get_secret_value().encode()
        return hmac.new(jwt_secret, FINGERPRINT_KEY_LABEL, hashlib.sha256).digest()

    def media_options(self) -> MediaOptions:
        return MediaOptions(**self._prefixed("media_", MediaOptions))

    def _prefixed(self, prefix: str, options: type[Any]) -> dict[str, Any]:
        """The values of ``options``' fields from the settings named ``prefix`` + field (the
        environment variable ``REALTIME_`` + that, upper-cased)."""
        return {f.name: getattr(self, prefix + f.name) for f in fields(options)}


LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})


def jwks_url_problem(url: str) -> str | None:
    """Why ``url`` cannot serve signing keys, or None. Keys fetched over plain http could be
    swapped by anyone on the path, so http is for a provider on this host only."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        return "not a URL"
    if parts.scheme not in {"https", "http"} or not host:
        return "must be an https:// URL"
    if parts.scheme == "http" and host not in LOOPBACK_HOSTS and not host.startswith("127."):
        return "must be https:// (plain http only to a loopback address)"
    return None


MAX_WORKERS = 256


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask, as a container's cpuset limits it);
    the machine's count where the platform has no affinity."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def parse_workers(value: str) -> int:
    """A worker count: ``auto`` (:func:`available_cpus`) or a whole number from 1 to 256."""
    text = value.strip().lower()
    if text == "auto":
        return available_cpus()
    if not text.isdigit() or not 1 <= int(text) <= MAX_WORKERS:
        raise ValueError(f"must be auto or a whole number from 1 to {MAX_WORKERS}, not {value!r}")
    return int(text)


def _variable_for(loc: tuple[int | str, ...], message: str) -> str:
    if loc:
        return f"{ENV_PREFIX}{str(loc[0]).upper()}"
    # Model-level validators prefix their message with the field name.
    field = message.removeprefix("Value error, ").split(":", 1)[0]
    return f"{ENV_PREFIX}{field.upper()}"


def load_settings(**overrides: Any) -> Settings:
    """Read the environment (``overrides`` win) and validate everything, dispatcher options too.

    Raises :class:`ConfigurationError` naming the first offending variable.
    """
    try:
        settings = Settings(**overrides)
    except ValidationError as exc:
        error = exc.errors()[0]
        message = str(error["msg"])
        variable = _variable_for(tuple(error["loc"]), message)
        detail = message.removeprefix("Value error, ")
        if ":" in detail and not error["loc"]:
            detail = detail.split(":", 1)[1].strip()
        raise ConfigurationError(variable, detail) from None
    settings.dispatch_options()
    settings.job_schedule()
    settings.conference_reaper_options()
    settings.recording_finalize_options()
    settings.projection_manifest()
    return settings
