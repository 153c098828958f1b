"""``realtime_dispatch.client`` keeps working after the SDK moved to ``realtime_dispatch_client``:
the same objects and the same modules under both names, never a second copy."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import realtime_dispatch_client


def test_the_public_names_are_the_sdks_own() -> None:
    old = importlib.import_module("realtime_dispatch.client")
    assert old.__all__ == realtime_dispatch_client.__all__
    for name in realtime_dispatch_client.__all__:
        assert getattr(old, name) is getattr(realtime_dispatch_client, name), name


def test_every_submodule_is_the_same_module_under_both_names() -> None:
    names = [found.name for found in pkgutil.iter_modules(realtime_dispatch_client.__path__)]
    assert {"client", "timeline", "events", "connection"} <= set(names)
    for name in names:
        new = importlib.import_module(f"realtime_dispatch_client.{name}")
        assert importlib.import_module(f"realtime_dispatch.client.{name}") is new, name


def test_a_submodule_imported_first_by_its_old_name() -> None:
    probe = (
        "from realtime_dispatch.client.timeline import Timeline\n"
        "import realtime_dispatch.client.events as events\n"
        "import realtime_dispatch_client.timeline as timeline, realtime_dispatch_client.events\n"
        "assert Timeline is timeline.Timeline\n"
        "assert events is realtime_dispatch_client.events\n"
        "import realtime_dispatch\n"
        "assert realtime_dispatch.client.timeline is timeline\n"
    )
    subprocess.run([sys.executable, "-c", probe], check=True)


def test_the_sdk_imports_its_modules_by_their_own_name() -> None:
    """Inside the SDK, ``realtime_dispatch.client`` would import the package that is still being
    imported (its second name imports it): a circular import in the client distribution."""
    old = []
    for path in Path(realtime_dispatch_client.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            old += [f"{path.name}: {n}" for n in names if n.startswith("realtime_dispatch.client")]
    assert not old, old
