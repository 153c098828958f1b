"""The client SDK stands on the wire contracts alone: importing it loads no server module and
none of the server's dependencies."""

from __future__ import annotations

import json
import subprocess
import sys

SERVER_ONLY = ("asyncpg", "fastapi", "redis", "uvicorn", "prometheus_client", "pydantic_settings")
CLIENT_PACKAGES = ("realtime_dispatch.client", "realtime_dispatch.contracts")
GROUND = (
    "realtime_dispatch",
    "realtime_dispatch.errors",
    "realtime_dispatch.values",  # the key types and the JSON aliases, pure
    "realtime_dispatch.values.keys",
    "realtime_dispatch.values.json_types",
    "realtime_dispatch.values.catalogue",  # the kinds' table, pure data
)

PROBE = """
import json, sys
import realtime_dispatch.client
print(json.dumps(sorted(sys.modules)))
"""


def test_importing_the_client_loads_no_server_module() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], check=True, capture_output=True, text=True
    ).stdout
    modules = set(json.loads(out))
    assert not {m for m in modules if m.split(".")[0] in SERVER_ONLY}
    ours = {m for m in modules if m.split(".")[0] == "realtime_dispatch"}
    strays = {m for m in ours if m not in GROUND and not m.startswith(CLIENT_PACKAGES)}
    assert not strays, f"the client imports server modules: {sorted(strays)}"
