"""Development secrets: when ``serve`` runs without ``REALTIME_HUB_JWT_SECRET`` (or the service
key) it generates them once, keeps them in ``REALTIME_DATA_DIR/dev-secrets.json`` (mode 0600),
and says so; ``realtime-dispatch token`` reads the same file, so its tokens work against it."""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

import orjson
from pydantic import SecretStr

from realtime_dispatch.database import default_data_dir
from realtime_dispatch.settings import Settings

FILE_NAME = "dev-secrets.json"


def _path(settings: Settings) -> Path:
    return (settings.data_dir or default_data_dir()) / FILE_NAME


def _load(path: Path) -> dict[str, str]:
    try:
        data = orjson.loads(path.read_bytes())
    except (FileNotFoundError, orjson.JSONDecodeError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def with_dev_secrets(settings: Settings, *, create: bool) -> Settings:
    """``settings`` with a JWT secret and service key filled in from the dev file where unset.

    With ``create`` the missing ones are generated and saved (and a line says so on stderr).
    """
    missing = {
        name
        for name, value in (
            ("hub_jwt_secret", settings.hub_jwt_secret),
            ("hub_service_key", settings.hub_service_key),
        )
        if value is None
    }
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
        names = ", ".join(f"REALTIME_{n.upper()}" for n in sorted(missing))
        print(
            f"realtime-dispatch: {names} not set; using development secrets from {path}",
            file=sys.stderr,
        )
    update = {name: SecretStr(stored[name]) for name in missing if name in stored}
    return settings.model_copy(update=update)
