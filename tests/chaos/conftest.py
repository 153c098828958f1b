"""Options for the chaos suite: ``--soak`` turns on the long soak run (outside CI)."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--soak",
        action="store_true",
        default=False,
        help="run the 30-minute soak of tests/chaos (outside CI)",
    )


@pytest.fixture
def soak_enabled(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--soak", default=False))
