"""Upper bounds of the options whose use has one: past them a finite value passes every
``> 0`` check and then fails deep inside a running process, turn after turn.

* :data:`TIMESTAMP_SPAN_MAX`: a duration that becomes a timestamp (``now`` minus the retention,
  ``now`` plus a backoff, a ring timeout, a token's lifetime). The retention's cut-off must stay
  after 1970 (it becomes the floor of a time-ordered id), Python's ``datetime`` ends in year
  9999 and PostgreSQL's ``interval`` and ``timestamptz`` have their own ends; ten years is far
  inside all of them and longer than any of these options means ("keep for ten years" is what
  "keep forever" can be).
* :data:`PG_MILLISECONDS_MAX`: a duration handed to PostgreSQL as a setting in milliseconds
  (``idle_session_timeout`` from the lock lease, ``statement_timeout``): those are 32-bit
  integers, so 2,147,483,647 ms, about 24.8 days.
"""

from __future__ import annotations

TIMESTAMP_SPAN_MAX = 315_360_000.0
"""Ten years (3,650 days), in seconds."""
PG_MILLISECONDS_MAX = 2_147_483.0
"""PostgreSQL's largest millisecond setting (2^31 - 1 ms), in whole seconds."""


def bound_text(bound: float) -> str:
    """How a bound is named in the one line that refuses a value past it."""
    return f"must be at most {bound:,.0f} s"
