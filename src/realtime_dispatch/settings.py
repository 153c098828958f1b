"""Settings: read from the environment once, at the edge, then passed down as frozen values.

:class:`Settings` is the only place that touches ``os.environ`` (through pydantic-settings, prefix
``REALTIME_``). Everything below takes the typed value objects it builds, such as
:class:`~realtime_dispatch.dispatch.options.RealtimeDispatchOptions`; each options class lives with
the component it configures, and holds the defaults. Tests build those objects directly.

A setting that configures a field of an options class is declared with :func:`option`: its
default is that field's default, read from the class (each default is written once, beside the
component), and the options are built from those settings (:meth:`Settings.build`). The
other settings are the process's own (the database, the ports, the backplane, the workers).
Each rule is checked in one place: by the options class where it checks its own values (the
variable is named from the setting that configures the field), else by the field's constraints
here (the bounds of bounds.py, and the options that check nothing themselves).

An invalid value raises :class:`~realtime_dispatch.errors.ConfigurationError` naming the variable;
the CLI turns that into one line on stderr and exit code 2.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, ValidationError, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from realtime_dispatch.auth.media import MediaOptions
from realtime_dispatch.auth.tokens import TokenOptions
from realtime_dispatch.dispatch.options import RealtimeDispatchOptions
from realtime_dispatch.edge.forwarded import IPNetwork, parse_networks
from realtime_dispatch.edge.http_limits import HttpLimits
from realtime_dispatch.errors import ConfigurationError
from realtime_dispatch.hub import HubOptions
from realtime_dispatch.manifest.manifest import Manifest, load_manifest, shipped_manifest
from realtime_dispatch.messenger.api.app import ApiOptions
from realtime_dispatch.messenger.api.send_rate import SendRate
from realtime_dispatch.messenger.jobs.call_reaper import CallReaperOptions
from realtime_dispatch.messenger.jobs.options import (
    ConferenceReaperOptions,
    JobSchedule,
    RecordingFinalizeOptions,
)
from realtime_dispatch.sync.service import SyncOptions
from realtime_dispatch.values.bounds import PG_MILLISECONDS_MAX, TIMESTAMP_SPAN_MAX
from realtime_dispatch.values.keys import KeyCodec, key_codec

T = TypeVar("T")

ENV_PREFIX = "REALTIME_"
FINGERPRINT_KEY_LABEL = b"realtime-dispatch message fingerprint key v1"


@dataclass(frozen=True, slots=True)
class OptionField:
    """The field ``name`` of the options dataclass ``options``, which a setting configures."""

    options: type[Any]
    name: str

    def field(self) -> dataclasses.Field[Any]:
        for field in dataclasses.fields(self.options):
            if field.name == self.name:
                return field
        raise TypeError(f"{self.options.__name__} has no field {self.name}")

    def holds_secret(self) -> bool:
        """Whether the field holds a :class:`SecretStr` (else a secret is handed over as its
        value)."""
        return "SecretStr" in str(self.field().type)


def option(options: type[Any], name: str, **constraints: Any) -> Any:
    """A setting for the field ``name`` of the dataclass ``options``: its default is the
    field's own (a value or a factory), and the field is recorded on the setting, so that
    :meth:`Settings.build` builds the options from it. ``constraints`` are pydantic's
    (``gt``, ``le``, …)."""
    target = OptionField(options, name)
    field = target.field()
    if field.default_factory is not dataclasses.MISSING:
        info: FieldInfo = Field(default_factory=field.default_factory, **constraints)
    elif field.default is not dataclasses.MISSING:
        info = Field(default=field.default, **constraints)
    else:
        raise TypeError(f"{options.__name__}.{name} has no default to share")
    info.metadata.append(target)
    return info


def option_field(info: FieldInfo) -> OptionField | None:
    """The options field a setting configures (declared with :func:`option`), or None."""
    return next((m for m in info.metadata if isinstance(m, OptionField)), None)


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

    # The dispatcher (RealtimeDispatchOptions checks them, naming the variable).
    dispatch_polling_interval: float = option(RealtimeDispatchOptions, "polling_interval")
    dispatch_batch_size: int = option(RealtimeDispatchOptions, "batch_size")
    dispatch_max_run_duration: float = option(RealtimeDispatchOptions, "max_run_duration")
    """Also the length of one run of a media lifecycle job (:meth:`job_schedule`)."""
    dispatch_max_attempts: int = option(RealtimeDispatchOptions, "max_attempts")
    dispatch_backoff_base: float = option(RealtimeDispatchOptions, "backoff_base")
    dispatch_backoff_factor: float = option(RealtimeDispatchOptions, "backoff_factor")
    dispatch_backoff_cap: float = option(RealtimeDispatchOptions, "backoff_cap")
    """The backoff's three are also the recording-finalize retry's, between its asks."""
    dispatch_lock_ttl: float = option(RealtimeDispatchOptions, "lock_ttl")
    """Also the media lifecycle jobs' lease."""
    dispatch_retention_done: float = option(RealtimeDispatchOptions, "retention_done")
    dispatch_listen: bool = option(RealtimeDispatchOptions, "listen")
    dispatch_linger: float = option(RealtimeDispatchOptions, "linger")
    dispatch_partitions: int = option(RealtimeDispatchOptions, "partitions")

    # ``worker``'s own /metrics, /healthz, /readyz (``--host``/``--port`` win); no port, none.
    worker_host: str = "127.0.0.1"
    worker_port: int | None = Field(default=None, ge=1, le=65535)

    backplane_enabled: bool = False
    backplane: Literal["none", "redis", "redis-cluster"] | None = None
    """Unset: ``redis`` when ``backplane_enabled``, else ``none``."""
    redis_url: SecretStr | None = None
    hub_jwt_secret: SecretStr | None = option(TokenOptions, "secret")
    hub_jwt_jwks_url: str | None = option(TokenOptions, "jwks_url")
    """An identity provider's JSON Web Key Set (RS256 / ES256 tokens), https (or http to a
    loopback address); needs the issuer and the audience."""
    hub_jwt_issuer: str | None = option(TokenOptions, "issuer")
    hub_jwt_audience: str | None = option(TokenOptions, "audience")
    hub_jwt_user_claim: str = option(TokenOptions, "user_claim")
    hub_url: str | None = None
    hub_service_key: SecretStr | None = option(HubOptions, "service_key")
    hub_ping_interval: float = option(HubOptions, "ping_interval", gt=0)
    hub_idle_timeout: float = option(HubOptions, "idle_timeout", gt=0)
    hub_max_connections_per_user: int = option(HubOptions, "max_connections_per_user", ge=1)
    hub_typing_interval: float = option(HubOptions, "typing_interval", gt=0, le=TIMESTAMP_SPAN_MAX)
    hub_presence_watch_limit: int = option(HubOptions, "presence_watch_limit", ge=1, le=100_000)
    """Users one connection may watch (``WatchPresence``); past it the invocation fails."""
    hub_presence_grace: float = option(HubOptions, "presence_grace", ge=0, le=3600)
    """Seconds a user stays online after their last connection closed."""
    hub_workers: str = "1"
    """Hub processes of ``hub`` / ``serve`` sharing one port (``REALTIME_HUB_WORKERS``): a
    whole number from 1, or ``auto`` (the CPUs this process may run on). :meth:`worker_count`."""

    # Durations that become timestamps are at most TIMESTAMP_SPAN_MAX (ten years), those handed
    # to PostgreSQL in milliseconds at most PG_MILLISECONDS_MAX (bounds.py).

    # The HTTP server's limits against slow or greedy clients (``serve`` / ``hub``).
    http_header_timeout: float = option(HttpLimits, "header_timeout", gt=0)
    http_body_timeout: float = option(HttpLimits, "body_timeout", gt=0)
    http_max_connections_per_client: int = option(HttpLimits, "max_per_client", ge=0)
    """Open connections from one client address; 0 turns the cap off. Behind a proxy listed
    in ``http_trusted_proxies`` the address is the one it forwards."""
    http_max_header_bytes: int = option(HttpLimits, "max_header_bytes", ge=1024, le=1024 * 1024)
    """The request line and headers of one request; past it 431 and the connection ends."""
    http_trusted_proxies: Annotated[tuple[str, ...], NoDecode] = option(
        HttpLimits, "trusted_proxies"
    )
    """Addresses or CIDRs of proxies whose ``Forwarded`` / ``X-Forwarded-For`` is believed."""
    # GET /api/sync: rows examined per page, the page's statement timeout, pages of one user at
    # once, and the connections of its own pool (so that it never takes the others').
    sync_scan_limit: int = option(SyncOptions, "scan_limit")
    sync_statement_timeout: float = option(SyncOptions, "statement_timeout", le=PG_MILLISECONDS_MAX)
    sync_max_per_user: int = option(SyncOptions, "max_per_user")
    sync_pool_size: int = Field(default=2, ge=1)
    sync_max_concurrent: int = option(SyncOptions, "max_concurrent")
    """Sync pages of anyone running at once in one process (the others wait their turn within
    ``sync_queue_timeout``); by default half the machine's cores, at least 1."""
    sync_queue_timeout: float = option(SyncOptions, "queue_timeout")
    """Seconds a sync page may wait for its turn among ``sync_max_concurrent`` (then 503)."""
    # Message sends and edits per user (REST), per replica: a token bucket.
    api_send_rate: float = option(SendRate, "rate")
    api_send_burst: int = option(SendRate, "burst")
    message_fingerprint_secret: SecretStr | None = None
    """Key of the idempotency fingerprints; unset: derived from ``REALTIME_HUB_JWT_SECRET``."""

    media_jitsi_app_id: str = option(MediaOptions, "jitsi_app_id")
    media_jitsi_app_secret: SecretStr | None = option(MediaOptions, "jitsi_app_secret")
    media_jitsi_domain: str = option(MediaOptions, "jitsi_domain")
    media_turn_urls: Annotated[tuple[str, ...], NoDecode] = option(MediaOptions, "turn_urls")
    media_turn_secret: SecretStr | None = option(MediaOptions, "turn_secret")
    media_token_ttl: float = option(MediaOptions, "token_ttl", gt=0, le=TIMESTAMP_SPAN_MAX)

    # The call-timeout reaper (``serve`` / ``hub``): a ringing call becomes Missed after the ring
    # timeout; an answered call still Active after the maximum duration becomes Ended.
    call_ring_timeout: float = option(
        CallReaperOptions, "ring_timeout", gt=0, le=TIMESTAMP_SPAN_MAX
    )
    call_max_duration: float = option(
        CallReaperOptions, "max_duration", gt=0, le=TIMESTAMP_SPAN_MAX
    )

    # The media lifecycle jobs (beside the call-timeout reaper): the conference-room reaper and
    # the recording-finalize retry (which also uses REALTIME_DISPATCH_BACKOFF_*, _LOCK_TTL and
    # _MAX_RUN_DURATION).
    media_jobs_batch_size: int = option(JobSchedule, "batch_size")
    media_jobs_pause_factor: float = option(JobSchedule, "pause")
    conference_empty_timeout: float = option(
        ConferenceReaperOptions, "empty_timeout", le=TIMESTAMP_SPAN_MAX
    )
    conference_max_duration: float = option(
        ConferenceReaperOptions, "max_duration", le=TIMESTAMP_SPAN_MAX
    )
    media_recording_status_url: str | None = option(RecordingFinalizeOptions, "status_url")
    """The media pipeline's recording status service: ``GET {url}/{recordingId}``."""
    recording_finalize_max_attempts: int = option(RecordingFinalizeOptions, "max_attempts")
    recording_finalize_timeout: float = option(
        RecordingFinalizeOptions, "timeout", le=TIMESTAMP_SPAN_MAX
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
        return self.build(TokenOptions, keys=self.keys())

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

    @classmethod
    def option_fields(cls) -> dict[str, OptionField]:
        """The settings declared with :func:`option`, by name: the options field each one
        configures."""
        found = {name: option_field(info) for name, info in cls.model_fields.items()}
        return {name: target for name, target in found.items() if target is not None}

    def values_for(self, options: type[Any]) -> dict[str, Any]:
        """The fields of ``options`` configured by a setting, with the settings' values; a
        secret is handed over as its value unless the field holds a :class:`SecretStr`."""
        values: dict[str, Any] = {}
        for name, target in self.option_fields().items():
            if target.options is options:
                value = getattr(self, name)
                if isinstance(value, SecretStr) and not target.holds_secret():
                    value = value.get_secret_value()
                values[target.name] = value
        return values

    def build(self, options: type[T], **given: Any) -> T:
        """``options`` from the settings that configure it (:meth:`values_for`) and ``given``.
        The options check their own values: a :class:`ValueError` of theirs that names a field
        (``"field: why"``) becomes a :class:`ConfigurationError` naming its variable."""
        try:
            return options(**{**self.values_for(options), **given})
        except ValueError as exc:
            field, _, why = str(exc).partition(": ")
            for name, target in self.option_fields().items():
                if target.options is options and target.name == field:
                    raise ConfigurationError(ENV_PREFIX + name.upper(), why) from None
            raise

    def dispatch_options(self) -> RealtimeDispatchOptions:
        return self.build(RealtimeDispatchOptions)

    def hub_options(
        self, *, redis_url: str | None = None, manifest: Manifest | None = None
    ) -> HubOptions:
        """The hub's options (``REALTIME_HUB_*``, the backplane's Redis URL, ``redis_url``
        overriding it, the manifest's ``member_chats``)."""
        url = redis_url
        if url is None and self.redis_url is not None:
            url = self.redis_url.get_secret_value()
        tokens = self.token_options()
        return self.build(
            HubOptions,
            jwt_secret=tokens.secret,
            tokens=tokens,
            backplane_url=url if self.backplane_mode != "none" else None,
            backplane_mode=self.backplane_mode,
            member_chats_sql=manifest.sql("member_chats") if manifest is not None else None,
            presence_chats_sql=(manifest or shipped_manifest()).sql("presence_chats"),
            max_negotiations_per_client=self.http_max_connections_per_client,
            presence_blocks=manifest is None or manifest.shipped,
        )

    def http_limits(self) -> HttpLimits:
        """The HTTP server's timeouts, head cap, per-address cap and trusted proxies
        (``REALTIME_HTTP_*``)."""
        return self.build(HttpLimits, trusted_proxies=self.trusted_proxy_networks())

    def job_schedule(self) -> JobSchedule:
        """The media lifecycle jobs' lease and run length (the dispatcher's), and their pace."""
        return self.build(
            JobSchedule,
            lock_ttl=self.dispatch_lock_ttl,
            max_run_duration=self.dispatch_max_run_duration,
        )

    def call_reaper_options(self) -> CallReaperOptions:
        return self.build(CallReaperOptions)

    def conference_reaper_options(self) -> ConferenceReaperOptions:
        return self.build(ConferenceReaperOptions)

    def recording_finalize_options(self) -> RecordingFinalizeOptions:
        """Between asks, the dispatcher's backoff."""
        backoff = self.dispatch_options().backoff
        return self.build(RecordingFinalizeOptions, backoff=backoff)

    def api_options(self) -> ApiOptions:
        return ApiOptions(
            jwt_secret=self.token_options().secret,
            media=self.media_options(),
            fingerprint_key=self.fingerprint_key(),
            send_rate=self.build(SendRate),
        )

    def sync_options(self) -> SyncOptions:
        return self.build(SyncOptions)

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
        return self.build(MediaOptions)


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
    """Read the environment (``overrides`` win) and validate everything, the options too.

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
    # The options that check their own values, built once here so that a bad one stops the
    # start (whichever command this is) rather than the component that would use it.
    settings.dispatch_options()
    settings.job_schedule()
    settings.conference_reaper_options()
    settings.recording_finalize_options()
    settings.sync_options()
    settings.api_options()
    settings.projection_manifest()
    return settings
