"""Each variable is documented once, is one setting, and each setting configures one field of
one options class (whose default it takes) or is the process's own: a default has one home."""

import ast
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from realtime_dispatch import settings as settings_module
from realtime_dispatch.auth.media import MediaOptions
from realtime_dispatch.auth.tokens import TokenOptions
from realtime_dispatch.dispatch.options import RealtimeDispatchOptions
from realtime_dispatch.edge.forwarded import parse_networks
from realtime_dispatch.edge.http_limits import HttpLimits
from realtime_dispatch.hub import HubOptions
from realtime_dispatch.messenger.api.send_rate import SendRate
from realtime_dispatch.messenger.jobs.call_reaper import CallReaperOptions
from realtime_dispatch.messenger.jobs.options import (
    ConferenceReaperOptions,
    JobSchedule,
    RecordingFinalizeOptions,
)
from realtime_dispatch.settings import ENV_PREFIX, OptionField, Settings, load_settings
from realtime_dispatch.sync.service import SyncOptions

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference.md"
SETTINGS_SOURCE = Path(settings_module.__file__)

# The settings that configure no options field: the process's own, read by the CLI.
PROCESS_SETTINGS = {
    "database_url": "the pools' URL, or the embedded server",
    "database_session_url": "the sessions' URL",
    "data_dir": "the embedded server's and the development secrets' directory",
    "projections": "the manifest's file",
    "key_type": "the key codec, shared by the outbox, the manifest and the tokens",
    "log_level": "the process's logging",
    "dev": "development mode",
    "worker_host": "the worker's probe server",
    "worker_port": "the worker's probe server",
    "backplane_enabled": "which publisher and backplane the process runs",
    "backplane": "which publisher and backplane the process runs",
    "redis_url": "the backplane's Redis",
    "hub_url": "where the worker POSTs pushes",
    "hub_workers": "how many processes share the port",
    "sync_pool_size": "the size of the pool the CLI opens for sync",
    "message_fingerprint_secret": "the key the fingerprint key is derived from",
}

# How each options class is built from the settings.
BUILDERS: dict[type[Any], Callable[[Settings], Any]] = {
    RealtimeDispatchOptions: Settings.dispatch_options,
    TokenOptions: Settings.token_options,
    HubOptions: lambda s: s.hub_options(),
    HttpLimits: Settings.http_limits,
    SyncOptions: Settings.sync_options,
    SendRate: lambda s: s.api_options().send_rate,
    MediaOptions: Settings.media_options,
    CallReaperOptions: Settings.call_reaper_options,
    JobSchedule: Settings.job_schedule,
    ConferenceReaperOptions: Settings.conference_reaper_options,
    RecordingFinalizeOptions: Settings.recording_finalize_options,
}

# A value other than the default, for the settings whose default gives no other one.
OTHER_VALUES: dict[str, dict[str, Any]] = {
    "hub_jwt_secret": {"hub_jwt_secret": "s" * 32},
    "hub_jwt_jwks_url": {
        "hub_jwt_jwks_url": "https://idp.example/keys",
        "hub_jwt_issuer": "https://idp.example/",
        "hub_jwt_audience": "api://realtime",
    },
    "hub_jwt_issuer": {"hub_jwt_issuer": "https://idp.example/"},
    "hub_jwt_audience": {"hub_jwt_audience": "api://realtime"},
    "hub_jwt_user_claim": {"hub_jwt_user_claim": "oid"},
    "hub_service_key": {"hub_service_key": "k" * 32},
    "http_trusted_proxies": {"http_trusted_proxies": "10.0.0.1, 10.1.0.0/16"},
    "media_jitsi_app_id": {"media_jitsi_app_id": "another-app"},
    "media_jitsi_app_secret": {"media_jitsi_app_secret": "j" * 32},
    "media_jitsi_domain": {"media_jitsi_domain": "meet.example"},
    "media_turn_urls": {"media_turn_urls": "turn:a:3478, turns:b:5349"},
    "media_turn_secret": {"media_turn_secret": "t" * 32},
    "media_recording_status_url": {"media_recording_status_url": "http://127.0.0.1:9/status"},
}


def documented() -> dict[str, str]:
    """docs/reference.md's configuration tables: each variable and its default column (split
    where one row documents two variables, ``A`` / ``B`` with ``x`` / ``y``)."""
    text = REFERENCE.read_text()
    section = text[text.index("## Configuration") :]
    section = section[: section.index("\n## ", 1)]
    found: dict[str, str] = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("| `REALTIME_"):
            continue
        names = re.findall(r"`(REALTIME_[A-Z0-9_]+)`", cells[0])
        assert "`_" not in cells[0], f"name every variable in full: {cells[0]}"
        defaults = cells[1].split(" / ") if len(names) > 1 else [cells[1]]
        assert len(defaults) == len(names), line
        for name, default in zip(names, defaults, strict=True):
            assert name not in found, f"{name} is documented twice"
            found[name] = default
    return found


def variable(setting: str) -> str:
    return ENV_PREFIX + setting.upper()


def other_value(name: str, target: OptionField) -> dict[str, Any]:
    if name in OTHER_VALUES:
        return OTHER_VALUES[name]
    default = getattr(Settings(_env_file=None), name)  # type: ignore[call-arg]
    if isinstance(default, bool):
        return {name: not default}
    if isinstance(default, int):
        return {name: default + 1}
    if isinstance(default, float):
        return {name: default * 2}
    raise AssertionError(f"give {name} ({target}) a value in OTHER_VALUES")


def plain(value: Any) -> Any:
    return value.get_secret_value() if isinstance(value, SecretStr) else value


def test_every_documented_variable_is_a_setting_and_every_setting_is_documented() -> None:
    settings = {variable(name) for name in Settings.model_fields}
    docs = set(documented())
    assert docs - settings == set(), "documented, but no setting"
    assert settings - docs == set(), "a setting docs/reference.md does not list"


def test_a_documented_default_is_the_settings_default() -> None:
    """Where the table gives the default as a value (`5`, `true`, `meet.local`), it is the one
    the setting has; an unset one (None, or an empty list) is documented as such."""
    defaults = Settings(_env_file=None).model_dump()  # type: ignore[call-arg]
    compared = 0
    for name, text in documented().items():
        default = defaults[name.removeprefix(ENV_PREFIX).lower()]
        literal = re.fullmatch(r"`([^`]*)`", text)
        if literal is not None and literal.group(1).startswith(ENV_PREFIX):
            literal = None  # another variable's value
        if default is None or default == ():
            assert literal is None, (name, text)
            continue
        if literal is None:
            continue  # said in words (``half the cores``, ``dev secret in serve``)
        value = literal.group(1)
        if isinstance(default, bool):
            assert value == str(default).lower(), name
        elif isinstance(default, (int, float)):
            assert float(value) == default, name
        else:
            assert value == str(default), name
        compared += 1
    assert compared >= 40, compared


def test_every_setting_configures_one_options_field_or_is_the_processes() -> None:
    targets = Settings.option_fields()
    for name in Settings.model_fields:
        assert (name in targets) != (name in PROCESS_SETTINGS), name
    fields = list(targets.values())
    assert len(set(fields)) == len(fields), "two settings configure one options field"
    assert {target.options for target in fields} == set(BUILDERS)


@pytest.mark.parametrize("name", sorted(Settings.option_fields()))
def test_a_setting_takes_its_options_fields_default(name: str) -> None:
    target = Settings.option_fields()[name]
    field = target.field()
    info = Settings.model_fields[name]
    if info.default_factory is not None:
        assert info.default_factory is field.default_factory
    else:
        assert info.default is field.default


def test_settings_py_writes_no_default_for_an_options_field() -> None:
    """Every setting that configures an options field is declared with ``option(...)`` (which
    takes the field's default), so its default cannot be written a second time here."""
    tree = ast.parse(SETTINGS_SOURCE.read_text())
    [cls] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Settings"]
    declared = {
        n.target.id: n.value
        for n in cls.body
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    }
    assert set(declared) == set(Settings.model_fields)
    for name in Settings.option_fields():
        value = declared[name]
        assert isinstance(value, ast.Call), name
        assert isinstance(value.func, ast.Name), name
        assert value.func.id == "option", name
        assert not any(k.arg in {"default", "default_factory"} for k in value.keywords), name
    for name in PROCESS_SETTINGS:
        value = declared[name]
        calls = isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
        assert not (calls and value.func.id == "option"), name  # type: ignore[union-attr]


@pytest.mark.parametrize("name", sorted(Settings.option_fields()))
def test_a_setting_reaches_its_options_field(name: str) -> None:
    """Set apart from its default, a setting is what the options built from the settings hold
    (so the mapping declared beside the setting is the one the builders use)."""
    target = Settings.option_fields()[name]
    values = other_value(name, target)
    default = getattr(BUILDERS[target.options](load_settings(_env_file=None)), target.name)
    built = getattr(BUILDERS[target.options](load_settings(_env_file=None, **values)), target.name)
    setting = getattr(load_settings(_env_file=None, **values), name)
    expected = parse_networks(setting) if name == "http_trusted_proxies" else setting
    assert plain(built) == plain(expected)
    assert plain(built) != plain(default)


def test_an_options_class_that_checks_its_values_is_their_only_lower_bound() -> None:
    """A rule is checked once: where the options class checks its values (raising an error the
    settings turn into one naming the variable), the setting adds no lower bound of its own."""
    checking = {cls for cls in BUILDERS if "__post_init__" in vars(cls)}
    assert {RealtimeDispatchOptions, SyncOptions, SendRate, JobSchedule} <= checking
    for name, target in Settings.option_fields().items():
        if target.options in checking:
            kinds = {type(m).__name__ for m in Settings.model_fields[name].metadata}
            assert not kinds & {"Gt", "Ge"}, (name, kinds)
