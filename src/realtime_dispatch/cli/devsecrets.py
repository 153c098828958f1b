"""Development secrets, in development mode only (:func:`dev_mode`: ``--dev``,
``REALTIME_DEV=true``, or the embedded default of ``serve``, with no ``REALTIME_DATABASE_URL``).
There, ``serve`` and ``hub`` without ``REALTIME_HUB_JWT_SECRET`` (or the service key, or any
media secret) generate them once (the JWT secret only when no identity provider's JWKS is
configured either), keep them in ``REALTIME_DATA_DIR/dev-secrets.json`` (mode 0600), and say
so; ``realtime-dispatch token`` reads the same file, so its tokens work against it.

Outside development mode no command reads or writes that file (:func:`deployment_secrets`): a
secret the configured features need is required (exit 2 naming it), and a feature whose secret
is absent and that the deployment does not need is off, said in one line at start.

Media secrets (``REALTIME_MEDIA_JITSI_APP_SECRET``, ``REALTIME_MEDIA_TURN_SECRET``) are generated
only when neither is set, so that call and conference invites still carry join tokens in
development; a deployment that configures one of them gets no generated other."""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

import orjson
from pydantic import SecretStr

from realtime_dispatch.cli.embedded_postgres import default_data_dir
from realtime_dispatch.errors import ConfigurationError
from realtime_dispatch.settings import Settings

FILE_NAME = "dev-secrets.json"
MEDIA_SECRETS = ("media_jitsi_app_secret", "media_turn_secret")


def _path(settings: Settings) -> Path:
    return (settings.data_dir or default_data_dir()) / FILE_NAME


def _load(path: Path) -> dict[str, str]:
    try:
        data = orjson.loads(path.read_bytes())
    except (FileNotFoundError, orjson.JSONDecodeError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def dev_mode(settings: Settings, *, dev: bool = False) -> bool:
    """Development mode: asked for (``--dev``, ``REALTIME_DEV=true``) or the embedded default
    (no ``REALTIME_DATABASE_URL``: ``serve``'s private PostgreSQL and the commands beside it)."""
    return dev or settings.dev or settings.database_url is None


def deployment_secrets(
    settings: Settings, *, with_dispatcher: bool, reference_api: bool
) -> list[str]:
    """Outside development mode: raise :class:`ConfigurationError` for a secret the process
    needs, and return the lines that say which features are off for want of theirs.

    ``hub`` without a backplane receives every push through its push endpoint: it needs
    ``REALTIME_HUB_SERVICE_KEY``. Behind a backplane, or in ``serve`` (whose dispatcher pushes
    in-process), the endpoint is off without it. Without a media secret the REST media routes
    answer 503 (``reference_api``); the dispatcher says the same of invites itself."""
    lines = []
    if settings.hub_service_key is None:
        if not with_dispatcher and settings.backplane_mode == "none":
            raise ConfigurationError(
                "REALTIME_HUB_SERVICE_KEY",
                "required by hub without a backplane (its workers push to it over HTTP)",
            )
        why = (
            "the dispatcher pushes in this process"
            if with_dispatcher
            else "pushes come through the backplane"
        )
        lines.append(f"REALTIME_HUB_SERVICE_KEY not set: the push endpoint is off ({why})")
    if reference_api and settings.media_jitsi_app_secret is None:
        lines.append(
            "REALTIME_MEDIA_JITSI_APP_SECRET not set: the media routes answer 503"
            " (POST /api/calls/{id}/media, /api/conferences/{id}/media)"
        )
    return lines


def require_secret_unless_dev(settings: Settings, *, dev: bool) -> None:
    """A deployment (``REALTIME_DATABASE_URL`` set) that forgot its JWT secret must not start
    on generated secrets and demo tokens: ConfigurationError (exit 2) unless development mode
    is asked for with ``--dev`` or ``REALTIME_DEV=true``. The embedded default needs neither,
    and neither does a deployment whose tokens come from an identity provider (a JWKS)."""
    if (
        settings.hub_jwt_secret is None
        and settings.hub_jwt_jwks_url is not None
        and settings.message_fingerprint_secret is None
        and settings.reference_messenger
    ):
        # Without an HS256 secret there is nothing to derive the fingerprints' key from; one of
        # the process's own would make a retried send after a restart look new.
        raise ConfigurationError(
            "REALTIME_MESSAGE_FINGERPRINT_SECRET",
            "required with REALTIME_HUB_JWT_JWKS_URL when REALTIME_HUB_JWT_SECRET is unset",
        )
    configured = settings.hub_jwt_secret is not None or settings.hub_jwt_jwks_url is not None
    if configured or dev_mode(settings, dev=dev):
        return
    raise ConfigurationError(
        "REALTIME_HUB_JWT_SECRET",
        "required with REALTIME_DATABASE_URL"
        " (or ask for development secrets with --dev or REALTIME_DEV=true)",
    )


def with_dev_secrets(settings: Settings, *, create: bool) -> Settings:
    """``settings`` with the hub JWT secret, the service key and (when no media secret is set)
    the media secrets filled in from the dev file where unset.

    With ``create`` the missing ones are generated and saved, and a line on stderr names the
    variables served from the dev file. Only in development mode (:func:`dev_mode`): the
    callers check it.
    """
    missing = {
        name
        for name, value in (
            ("hub_jwt_secret", settings.hub_jwt_secret),
            ("hub_service_key", settings.hub_service_key),
        )
        if value is None
    }
    if settings.hub_jwt_jwks_url is not None:
        # Tokens come from an identity provider: no HS256 secret of our making beside it.
        missing.discard("hub_jwt_secret")
    if settings.media_jitsi_app_secret is None and settings.media_turn_secret is None:
        missing |= set(MEDIA_SECRETS)
    if not missing:
        return settings
    path = _path(settings)
    stored = _load(path)
    if create and not missing <= stored.keys():
        for name in missing - stored.keys():
            stored[name] = secrets.token_urlsafe(32)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(orjson.dumps(stored))
    if create:
        names = ", ".join(f"REALTIME_{n.upper()}" for n in sorted(missing))
        print(
            f"realtime-dispatch: {names} not set; using development secrets from {path}",
            file=sys.stderr,
        )
    update = {name: SecretStr(stored[name]) for name in missing if name in stored}
    return settings.model_copy(update=update)
