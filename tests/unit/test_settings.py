import math
from dataclasses import fields
from datetime import UTC, datetime, timedelta

import pytest

from realtime_dispatch.database.connections import lock_connection_settings
from realtime_dispatch.dispatch.options import RealtimeDispatchOptions
from realtime_dispatch.errors import ConfigurationError
from realtime_dispatch.messenger.api.send_rate import SendRate
from realtime_dispatch.settings import Settings, load_settings
from realtime_dispatch.values.ids import id_floor


def refused_variable(*args: object, **values: object) -> str:
    """The variable named by the :class:`ConfigurationError` that ``load_settings`` raises."""
    with pytest.raises(ConfigurationError) as info:
        load_settings(*args, **values)  # type: ignore[arg-type]
    return info.value.variable


def test_defaults_are_the_specs() -> None:
    o = load_settings(_env_file=None).dispatch_options()
    assert (o.polling_interval, o.batch_size, o.max_run_duration, o.max_attempts) == (1, 200, 5, 8)
    assert (o.backoff_base, o.backoff_factor, o.backoff_cap) == (2, 2.0, 120)
    assert (o.lock_ttl, o.retention_done) == (30, 86400)


@pytest.mark.parametrize(
    ("kwargs", "variable"),
    [
        ({"batch_size": 0}, "REALTIME_DISPATCH_BATCH_SIZE"),
        ({"max_attempts": 0}, "REALTIME_DISPATCH_MAX_ATTEMPTS"),
        ({"polling_interval": 0}, "REALTIME_DISPATCH_POLLING_INTERVAL"),
        ({"backoff_base": -1}, "REALTIME_DISPATCH_BACKOFF_BASE"),
        ({"backoff_factor": 0.5}, "REALTIME_DISPATCH_BACKOFF_FACTOR"),
        ({"backoff_cap": 1}, "REALTIME_DISPATCH_BACKOFF_CAP"),
        ({"max_run_duration": 30, "lock_ttl": 30}, "REALTIME_DISPATCH_MAX_RUN_DURATION"),
        ({"retention_done": 0}, "REALTIME_DISPATCH_RETENTION_DONE"),
        ({"linger": -0.001}, "REALTIME_DISPATCH_LINGER"),
        ({"linger": 5}, "REALTIME_DISPATCH_LINGER"),
    ],
)
def test_invalid_options_name_the_variable(kwargs: dict[str, float], variable: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        RealtimeDispatchOptions(**kwargs)  # type: ignore[arg-type]
    assert info.value.variable == variable
    assert str(info.value).startswith(variable)


@pytest.mark.parametrize(
    ("kwargs", "variable"),
    [
        ({"retention_done": 315_360_001}, "REALTIME_DISPATCH_RETENTION_DONE"),
        ({"retention_done": 1.8e9}, "REALTIME_DISPATCH_RETENTION_DONE"),
        ({"lock_ttl": 2_147_484}, "REALTIME_DISPATCH_LOCK_TTL"),
        ({"backoff_cap": 315_360_001}, "REALTIME_DISPATCH_BACKOFF_CAP"),
    ],
)
def test_options_past_their_bound_name_the_variable_and_the_bound(
    kwargs: dict[str, float], variable: str
) -> None:
    with pytest.raises(ConfigurationError) as info:
        RealtimeDispatchOptions(**kwargs)  # type: ignore[arg-type]
    assert info.value.variable == variable
    assert "must be at most" in str(info.value)


def test_options_at_their_bound_pass() -> None:
    o = RealtimeDispatchOptions(
        retention_done=315_360_000, lock_ttl=2_147_483, backoff_cap=315_360_000
    )
    # At the bound, the uses that overflowed past it still work.
    id_floor(datetime.now(UTC) - timedelta(seconds=o.retention_done))
    timeout = int(lock_connection_settings(o.lock_ttl, o.polling_interval)["idle_session_timeout"])
    assert timeout <= 2**31 - 1


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("hub_typing_interval", 315_360_001),
        ("sync_statement_timeout", 2_147_484),
        ("media_token_ttl", 1e12),
        ("call_ring_timeout", 1e12),
        ("call_max_duration", 1e12),
        ("conference_empty_timeout", 1e12),
        ("conference_max_duration", 1e12),
        ("recording_finalize_timeout", 1e12),
    ],
)
def test_settings_past_their_bound_name_the_variable(name: str, value: float) -> None:
    with pytest.raises(ConfigurationError) as info:
        load_settings(**{name: value})
    assert info.value.variable == f"REALTIME_{name.upper()}"
    assert "less than or equal to" in str(info.value)


def test_settings_validate_dispatch_options_too() -> None:
    assert refused_variable(dispatch_batch_size=-5) == "REALTIME_DISPATCH_BATCH_SIZE"


def test_type_errors_name_the_variable() -> None:
    variable = refused_variable(dispatch_polling_interval="soon")
    assert variable == "REALTIME_DISPATCH_POLLING_INTERVAL"


def test_backplane_needs_redis_url() -> None:
    assert refused_variable(backplane_enabled=True, redis_url=None) == "REALTIME_REDIS_URL"


def test_secrets_are_masked_in_repr() -> None:
    s = load_settings(hub_jwt_secret="topsecret", database_url="postgresql://u:pw@h/db")
    assert "topsecret" not in repr(s)
    assert "pw@" not in repr(s)


def test_turn_urls_are_a_comma_list() -> None:
    s = load_settings(media_turn_urls="turn:a:3478, turns:b:5349")
    assert s.media_options().turn_urls == ("turn:a:3478", "turns:b:5349")


def test_call_timeouts_default_and_validate() -> None:
    s = load_settings(_env_file=None)
    assert (s.call_ring_timeout, s.call_max_duration) == (45, 4 * 3600)
    bad: list[tuple[dict[str, object], str]] = [
        ({"call_ring_timeout": 0}, "REALTIME_CALL_RING_TIMEOUT"),
        ({"call_ring_timeout": "soon"}, "REALTIME_CALL_RING_TIMEOUT"),
        ({"call_ring_timeout": "inf"}, "REALTIME_CALL_RING_TIMEOUT"),
        ({"call_max_duration": -1}, "REALTIME_CALL_MAX_DURATION"),
        ({"call_max_duration": 30, "call_ring_timeout": 45}, "REALTIME_CALL_MAX_DURATION"),
    ]
    for overrides, variable in bad:
        assert refused_variable(**overrides) == variable, overrides


@pytest.mark.parametrize(
    ("values", "variable"),
    [
        ({"hub_jwt_jwks_url": "http://idp.example/jwks"}, "REALTIME_HUB_JWT_JWKS_URL"),
        ({"hub_jwt_jwks_url": "ftp://idp.example/jwks"}, "REALTIME_HUB_JWT_JWKS_URL"),
        ({"hub_jwt_jwks_url": "https://idp.example/jwks"}, "REALTIME_HUB_JWT_ISSUER"),
        (
            {"hub_jwt_jwks_url": "https://idp.example/jwks", "hub_jwt_issuer": "https://idp"},
            "REALTIME_HUB_JWT_AUDIENCE",
        ),
        ({"hub_jwt_issuer": ""}, "REALTIME_HUB_JWT_ISSUER"),
        ({"hub_jwt_user_claim": "user id"}, "REALTIME_HUB_JWT_USER_CLAIM"),
        ({"hub_jwt_user_claim": ""}, "REALTIME_HUB_JWT_USER_CLAIM"),
    ],
)
def test_token_settings_name_the_variable(values: dict[str, str], variable: str) -> None:
    assert refused_variable(**values) == variable


def test_token_settings_become_token_options() -> None:
    s = load_settings(
        hub_jwt_secret="s" * 40,
        hub_jwt_jwks_url="https://login.example/keys",
        hub_jwt_issuer="https://login.example/",
        hub_jwt_audience="api://realtime",
        hub_jwt_user_claim="oid",
    )
    options = s.token_options()
    assert (options.jwks_url, options.issuer, options.audience, options.user_claim) == (
        "https://login.example/keys",
        "https://login.example/",
        "api://realtime",
        "oid",
    )
    assert "s" * 40 not in repr(options)
    loopback = load_settings(
        hub_jwt_jwks_url="http://127.0.0.1:8080/jwks", hub_jwt_issuer="i", hub_jwt_audience="a"
    )
    assert loopback.token_options().user_claim == "sub"


FLOAT_SETTINGS = sorted(name for name, f in Settings.model_fields.items() if f.annotation is float)


def test_every_float_setting_is_listed() -> None:
    """The parametrised test below covers every float setting: the list is taken from the model,
    and holds the options the spec names (so an empty or shrunken list cannot pass unseen)."""
    spec = {
        f"dispatch_{name}"
        for name in (
            "polling_interval",
            "max_run_duration",
            "backoff_base",
            "backoff_factor",
            "backoff_cap",
            "lock_ttl",
            "retention_done",
            "linger",
        )
    }
    others = {"hub_ping_interval", "hub_idle_timeout", "media_token_ttl", "call_ring_timeout"}
    assert spec | others <= set(FLOAT_SETTINGS)


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "Infinity", float("inf"), float("nan")])
@pytest.mark.parametrize("name", FLOAT_SETTINGS)
def test_float_settings_must_be_finite(name: str, value: object) -> None:
    assert refused_variable(_env_file=None, **{name: value}) == f"REALTIME_{name.upper()}"


DISPATCH_FLOATS = [f.name for f in fields(RealtimeDispatchOptions) if isinstance(f.default, float)]


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
@pytest.mark.parametrize("name", DISPATCH_FLOATS)
def test_dispatch_options_must_be_finite(name: str, value: float) -> None:
    """Built directly (as tests and embedders do), the options refuse what settings refuse."""
    with pytest.raises(ConfigurationError) as info:
        RealtimeDispatchOptions(**{name: value})  # type: ignore[arg-type]
    assert info.value.variable == f"REALTIME_DISPATCH_{name.upper()}"


def test_media_job_options_default_and_validate() -> None:
    s = load_settings(_env_file=None)
    conferences = s.conference_reaper_options()
    assert (conferences.empty_timeout, conferences.max_duration) == (300, 8 * 3600)
    recordings = s.recording_finalize_options()
    assert (recordings.status_url, recordings.max_attempts, recordings.timeout) == (None, 8, 600)
    assert recordings.backoff == s.dispatch_options().backoff  # the dispatcher's backoff
    schedule = s.job_schedule()
    assert (schedule.lock_ttl, schedule.max_run_duration) == (30, 5)
    assert (schedule.batch_size, schedule.pause) == (50, 3)
    assert load_settings(media_recording_status_url="").media_recording_status_url is None
    url = "http://127.0.0.1:9000/recordings/status"
    assert load_settings(media_recording_status_url=url).recording_finalize_options().status_url
    bad: list[tuple[dict[str, object], str]] = [
        ({"conference_empty_timeout": 0}, "REALTIME_CONFERENCE_EMPTY_TIMEOUT"),
        ({"conference_empty_timeout": "nan"}, "REALTIME_CONFERENCE_EMPTY_TIMEOUT"),
        ({"conference_max_duration": "inf"}, "REALTIME_CONFERENCE_MAX_DURATION"),
        ({"conference_max_duration": -5}, "REALTIME_CONFERENCE_MAX_DURATION"),
        ({"recording_finalize_max_attempts": 0}, "REALTIME_RECORDING_FINALIZE_MAX_ATTEMPTS"),
        ({"recording_finalize_max_attempts": "x"}, "REALTIME_RECORDING_FINALIZE_MAX_ATTEMPTS"),
        ({"recording_finalize_timeout": "inf"}, "REALTIME_RECORDING_FINALIZE_TIMEOUT"),
        ({"recording_finalize_timeout": 0}, "REALTIME_RECORDING_FINALIZE_TIMEOUT"),
        ({"media_recording_status_url": "ftp://m/s"}, "REALTIME_MEDIA_RECORDING_STATUS_URL"),
        ({"media_recording_status_url": "http://m/s?x=1"}, "REALTIME_MEDIA_RECORDING_STATUS_URL"),
        ({"media_recording_status_url": "not a url"}, "REALTIME_MEDIA_RECORDING_STATUS_URL"),
        ({"media_jobs_batch_size": 0}, "REALTIME_MEDIA_JOBS_BATCH_SIZE"),
        ({"media_jobs_pause_factor": -1}, "REALTIME_MEDIA_JOBS_PAUSE_FACTOR"),
        ({"media_jobs_pause_factor": "nan"}, "REALTIME_MEDIA_JOBS_PAUSE_FACTOR"),
    ]
    for overrides, variable in bad:
        assert refused_variable(**overrides) == variable, overrides


@pytest.mark.parametrize(
    ("values", "variable"),
    [
        ({"api_send_rate": 0}, "REALTIME_API_SEND_RATE"),
        ({"api_send_rate": "fast"}, "REALTIME_API_SEND_RATE"),
        ({"api_send_rate": "inf"}, "REALTIME_API_SEND_RATE"),
        ({"api_send_burst": 0}, "REALTIME_API_SEND_BURST"),
        ({"api_send_burst": 2.5}, "REALTIME_API_SEND_BURST"),
    ],
)
def test_send_rate_settings_name_the_variable(values: dict[str, object], variable: str) -> None:
    assert refused_variable(**values) == variable


def test_send_rate_defaults_and_settings_become_api_options() -> None:
    assert load_settings(_env_file=None).api_options().send_rate == SendRate(10.0, 30)
    rate = load_settings(api_send_rate=2.5, api_send_burst=4).api_options().send_rate
    assert (rate.rate, rate.burst) == (2.5, 4)
