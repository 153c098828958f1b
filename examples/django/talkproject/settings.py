"""Settings of the talk example: one PostgreSQL database, shared with realtime-dispatch.

``TALK_DATABASE_URL`` (``postgresql://user@host:5432/name``) names it; ``REALTIME_HUB_JWT_SECRET``
is the secret the hub verifies the tokens this app mints with (``talk.tokens``).
"""

import os
from urllib.parse import parse_qs, unquote, urlsplit

_db = urlsplit(os.environ.get("TALK_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/talk"))

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "talk-example-not-for-production")
DEBUG = os.environ.get("DJANGO_DEBUG", "") == "1"
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS = ["django.contrib.auth", "django.contrib.contenttypes", "talk"]
MIDDLEWARE: list[str] = []
ROOT_URLCONF = "talkproject.urls"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _db.path.lstrip("/"),
        "USER": unquote(_db.username or ""),
        "PASSWORD": unquote(_db.password or ""),
        # a unix socket directory as ?host=/run/postgresql, else the URL's host
        "HOST": parse_qs(_db.query).get("host", [_db.hostname or ""])[0],
        "PORT": str(_db.port or ""),
    }
}
# Every key a bigint: REALTIME_KEY_TYPE=bigint on every realtime-dispatch command.
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
TIME_ZONE = "UTC"

REALTIME_HUB_JWT_SECRET = os.environ.get("REALTIME_HUB_JWT_SECRET", "")
REALTIME_TOKEN_TTL = 3600  # seconds
