"""``realtime_dispatch.client``: the Python client SDK under its name in the full package.

The SDK is the package ``realtime_dispatch_client`` (the ``realtime-dispatch-client``
distribution, which ``realtime-dispatch`` contains). This module names the same objects, and its
submodules (``realtime_dispatch.client.timeline`` …) are the SDK's own modules, not copies, so a
class imported through either name is the same class.
"""

from __future__ import annotations

import importlib
import sys

from realtime_dispatch_client import *  # noqa: F403
from realtime_dispatch_client import __all__ as __all__  # noqa: PLC0414

_SUBMODULES = (
    "apply",
    "client",
    "connection",
    "events",
    "exceptions",
    "protocol",
    "rest",
    "seen",
    "timeline",
)

for _name in _SUBMODULES:
    _module = importlib.import_module(f"realtime_dispatch_client.{_name}")
    sys.modules[f"{__name__}.{_name}"] = _module
    globals()[_name] = _module
