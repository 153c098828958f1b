"""docs/hub.md's module table lists exactly the module files of ``src/realtime_dispatch/hub``
(every ``.py`` file under it but the packages' ``__init__.py``), one row each."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HUB = ROOT / "src" / "realtime_dispatch" / "hub"
ROW = re.compile(r"^\| `([^`]+\.py)` \|")


def table_modules(text: str) -> list[str]:
    """The first column of the table whose header is ``| module | what it holds |``."""
    lines = text.splitlines()
    start = lines.index("| module | what it holds |")
    modules = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        match = ROW.match(line)
        assert match, f"not one module per row: {line!r}"
        modules.append(match.group(1))
    return modules


def test_module_table_lists_every_module_file_once() -> None:
    listed = table_modules((ROOT / "docs" / "hub.md").read_text())
    files = sorted(
        path.relative_to(HUB).as_posix() for path in HUB.rglob("*.py") if path.name != "__init__.py"
    )
    assert len(listed) == len(set(listed)), "a module listed twice"
    assert sorted(listed) == files


def test_table_parser_sees_a_missing_row() -> None:
    text = "| module | what it holds |\n|---|---|\n| `runtime.py` | the Hub |\n\nafter\n"
    assert table_modules(text) == ["runtime.py"]
