"""What a runner knows about its database and its lock, as plain values: the state that
``/readyz`` reports, and the outage a runner is riding out (how long to wait before the next
attempt). No I/O: :mod:`.runner` feeds it what happened.

While PostgreSQL cannot be reached a runner does not poll at its usual pace and logs nothing
per attempt: it waits ``RECONNECT_BASE`` doubling up to ``reconnect_cap`` (jittered), and the
log carries one line when the outage starts and one when it ends.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from realtime_dispatch.outbox.backoff import backoff_delay

RECONNECT_BASE = 0.1
RECONNECT_CAP = 5.0


class RunnerState(Enum):
    """``/readyz`` reports these per runner (docs/reference.md, "Worker probes")."""

    STARTING = "starting"  # no turn completed yet
    ACTIVE = "active"  # held the lock in its last turn
    STANDBY = "standby"  # connected; another runner holds the lock (takes over if it goes)
    UNAVAILABLE = "database_unavailable"  # PostgreSQL cannot be reached: backing off
    FAILING = "failing"  # the last turn failed for another reason (see dispatch_pass_failed)
    STOPPED = "stopped"

    @property
    def ready(self) -> bool:
        """Can this runner dispatch (now, or as soon as the lock is free)?"""
        return self in (RunnerState.ACTIVE, RunnerState.STANDBY)


def reconnect_cap(polling_interval: float) -> float:
    """The longest wait between attempts during an outage: :data:`RECONNECT_CAP`, or the polling
    interval when shorter, so that due rows go out within one polling interval of the database
    coming back, as they do when a notification is lost (a failed attempt costs one refused
    connection and no log line)."""
    return max(RECONNECT_BASE, min(RECONNECT_CAP, polling_interval))


@dataclass
class Outage:
    """An outage in progress: when it started (monotonic seconds) and the attempts so far."""

    started: float
    cap: float
    attempts: int = 1

    def next_delay(self, rand: Callable[[], float] = random.random) -> float:
        """Seconds until the next attempt: 0.1 s doubling per failed attempt, up to the cap,
        shortened by up to a fifth at random (runners of many workers do not retry in step)."""
        return backoff_delay(
            self.attempts, base=RECONNECT_BASE, factor=2.0, cap=self.cap, rand=rand
        )

    def failed_again(self) -> None:
        self.attempts += 1
