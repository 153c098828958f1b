"""What the tests and the benchmarks share: real processes and their readings (``procs``), the
latency statistics (``stats``), the hub's wire pieces and test tokens (``hub_wire``) and the
scratch databases (``databases``).

A repository package, not part of the wheel: pytest finds it through ``pythonpath`` in
pyproject.toml, the benchmarks because they run as modules from the repository root
(``python -m bench.<group>.<name>``)."""
