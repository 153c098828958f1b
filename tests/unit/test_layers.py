"""The layer contracts of ``pyproject.toml`` (``lint-imports``) hold for the source, and fail
once a forbidden import is added to a copy of it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(source: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(source)}
    return subprocess.run(
        [LINT_IMPORTS, ROOT / "pyproject.toml", "--no-cache"],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )


def copy_of_source(tmp_path: Path) -> Path:
    source = tmp_path / "src"
    for package in ("realtime_dispatch", "realtime_dispatch_client"):
        shutil.copytree(
            ROOT / "src" / package,
            source / package,
            ignore=shutil.ignore_patterns("__pycache__", "static", "*.sql"),
        )
    return source


def test_the_source_keeps_every_contract(tmp_path: Path) -> None:
    result = lint_imports(copy_of_source(tmp_path), tmp_path)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "6 kept, 0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("hub/connections/registry.py", "import realtime_dispatch.messenger.chats", "Layers"),
        ("outbox/store.py", "import realtime_dispatch.dispatch.options", "Layers"),
        ("contracts/base.py", "import realtime_dispatch.database.connections", "wire format only"),
        ("contracts/base.py", "import realtime_dispatch.delivery.push", "wire format only"),
        ("values/keys.py", "import realtime_dispatch.delivery.push", "Layers"),
        ("../realtime_dispatch_client/timeline.py", "import asyncpg", "client SDK"),
        ("sync/store.py", "import realtime_dispatch.messenger.schema", "reference messenger"),
        (
            "contracts/signals.py",
            "import realtime_dispatch.contracts.messenger_rest",
            "reference messenger",
        ),
        ("hub/runtime.py", "import realtime_dispatch.hub.serving.routes", "No import cycles"),
        (
            "hub/wire/protocol.py",
            "import realtime_dispatch.hub.connections.registry",
            "hub's parts",
        ),
        (
            "hub/backplane/publishers.py",
            "import realtime_dispatch.hub.transports.sse",
            "hub's parts",
        ),
        (  # an annotation-only import is an import too
            "hub/transports/sse.py",
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    import realtime_dispatch.hub.runtime",
            "hub's parts",
        ),
        ("edge/request_guard.py", "import realtime_dispatch.hub.runtime", "Layers"),
    ],
)
def test_a_forbidden_import_breaks_a_contract(
    tmp_path: Path, module: str, line: str, contract: str
) -> None:
    source = copy_of_source(tmp_path)
    target = source / "realtime_dispatch" / module
    target.write_text(target.read_text() + f"\n{line}  # added by the test\n")
    result = lint_imports(source, tmp_path)
    assert result.returncode == 1, result.stdout[-3000:]
    broken = result.stdout.split("Broken contracts", 1)[-1]
    assert contract in broken
    assert module.rsplit("/", 1)[-1].removesuffix(".py") in broken


def test_the_pipeline_contract_names_every_wire_module_but_the_messengers() -> None:
    """The ``pipeline`` contract lists the wire modules one by one (a package that is a source
    cannot forbid its own child), so a new module of ``contracts`` must be added to it."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (pipeline,) = [c for c in config["tool"]["importlinter"]["contracts"] if c["id"] == "pipeline"]
    listed = {m for m in pipeline["source_modules"] if m.startswith("realtime_dispatch.contracts.")}
    wire = ROOT / "src" / "realtime_dispatch" / "contracts"
    expected = {
        f"realtime_dispatch.contracts.{path.stem}"
        for path in wire.glob("*.py")
        if path.stem not in ("__init__", "messenger_rest")
    }
    assert listed == expected
    assert "realtime_dispatch.contracts.messenger_rest" in pipeline["forbidden_modules"]
