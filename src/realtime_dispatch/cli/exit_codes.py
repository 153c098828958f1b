"""How the CLI fails: one line on stderr and a fixed exit code, never a traceback."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2  # invalid settings or arguments
