"""How much retention deletes, and when (pure; the runner does the I/O).

Retention deletes Done rows in batches, each its own short statement, between passes, after
the pass has released the dispatch lock. A fixed quota (the former 20 batches of 1,000 a
minute, ~333 rows/s) falls behind any faster insert rate, so the quota adapts instead:

* **batch size** follows the time a delete takes: doubled while a full batch finishes well
  under ``target_batch_seconds``, halved when one takes more than twice that (no long lock, no
  long statement, whatever the row width or the machine);
* **time per turn**: a sweep runs until the backlog of old Done rows is gone or its budget is
  spent. Caught up, the next sweep waits ``every`` seconds; behind, the next turn (after the
  next pass) sweeps again, with a budget of ``duty`` × the time since the last sweep, so
  retention takes at most that share of the runner's time while dispatch keeps the rest.

Deleting the oldest ids first, in small batches, lets VACUUM reuse the space at the front of the
table: the table stays bounded instead of bloating. Autovacuum normally does that; when dead row
versions outnumber the live ones after a sweep (autovacuum off or behind), the runner starts a
plain ``VACUUM`` of the outbox itself, in the background, one at a time.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class RetentionPolicy:
    every: float = 60.0  # seconds between sweeps while caught up
    duty: float = 0.25  # share of the runner's time a sweep may take while behind
    min_budget: float = 0.05  # seconds a sweep may always take
    max_budget: float = 2.0  # seconds a sweep may take at most (dispatch waits meanwhile)
    target_batch_seconds: float = 0.05
    min_batch: int = 500
    max_batch: int = 50_000
    batch: int = 1000
    vacuum_min_dead: int = 50_000  # dead row versions below which a VACUUM is not worth it
    behind: bool = False
    last_sweep_end: float | None = None

    def needs_vacuum(self, live: int, dead: int) -> bool:
        """Dead row versions outnumber the live ones (and are many): autovacuum is off or
        behind, and the table would grow with every purge; a plain VACUUM makes the space
        reusable."""
        return dead >= max(self.vacuum_min_dead, live)

    def due(self, now: float) -> bool:
        """Sweep now? At once when behind (or never swept), else every ``every`` seconds."""
        if self.behind or self.last_sweep_end is None:
            return True
        return now - self.last_sweep_end >= self.every

    def budget(self, now: float) -> float:
        """Seconds this sweep may spend deleting."""
        if not self.behind or self.last_sweep_end is None:
            return self.max_budget
        share = self.duty * (now - self.last_sweep_end)
        return min(self.max_budget, max(self.min_budget, share))

    def observe(self, limit: int, deleted: int, seconds: float) -> None:
        """Adapt the batch size to one delete of up to ``limit`` rows."""
        if deleted >= limit and seconds < self.target_batch_seconds / 2:
            self.batch = min(self.max_batch, self.batch * 2)
        elif seconds > self.target_batch_seconds * 2:
            self.batch = max(self.min_batch, self.batch // 2)

    def finish(self, now: float, *, caught_up: bool) -> None:
        self.behind = not caught_up
        self.last_sweep_end = now
