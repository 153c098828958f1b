"""The benchmarks, grouped by what they measure (``bench/README.md``). Each runs as a module
from the repository root: ``python -m bench.<group>.<name>``."""
