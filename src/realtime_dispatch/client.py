"""``realtime_dispatch.client``: the Python client SDK under its name in the full package.

The SDK is the package ``realtime_dispatch_client`` (the ``realtime-dispatch-client``
distribution, which ``realtime-dispatch`` contains). This module names the same objects, and its
submodules (``realtime_dispatch.client.timeline`` …) are the SDK's own modules, not copies, so a
class imported through either name is the same class.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

import realtime_dispatch_client
from realtime_dispatch_client import *  # noqa: F403
from realtime_dispatch_client import __all__ as __all__  # noqa: PLC0414

for _found in pkgutil.iter_modules(realtime_dispatch_client.__path__):
    _module = importlib.import_module(f"realtime_dispatch_client.{_found.name}")
    sys.modules[f"{__name__}.{_found.name}"] = _module
    globals()[_found.name] = _module
