"""A closed connection's memory back within seconds: :class:`GarbageSweep`.

The servers tune the cyclic GC for throughput (``tune_gc`` in :mod:`realtime_dispatch.cli.main`:
the heap after the imports frozen, a young generation of 20,000 objects): full collections are
rare, and an idle server runs none. A connection cut mid-work leaves reference cycles (a
WebSocket's protocol and its session, an SSE stream's or a long poll's tasks and events), and
only a full collection frees what has aged into the oldest generation: before, an idle hub kept
a dead flood's 1.9 million objects until something else made it collect.

The HTTP protocol breaks its own cycles when a connection ends or is upgraded
(:mod:`.http_protocol`); what the transports leave is swept here: one full collection
``delay`` seconds after a connection ended, none while no connection ends, and never more than
:data:`MAX_CPU_SHARE` of the time: a collection costs in proportion to the objects alive (not
frozen) and the garbage waiting (60–90 ms of CPU in the churn benchmark, docs/BENCHMARKS.md,
last section), so a costly collection puts the next one off (:func:`rest_after`).
"""

from __future__ import annotations

import asyncio
import gc
import time

import structlog

log = structlog.get_logger(__name__)

GC_SWEEP_DELAY = 5.0
"""Seconds from a connection's end to the full collection that frees what it left."""
MAX_CPU_SHARE = 0.01
"""The sweeps' CPU, at most, as a share of the time."""


def rest_after(cpu_seconds: float, delay: float, share: float = MAX_CPU_SHARE) -> float:
    """Seconds to wait after a sweep that took ``cpu_seconds`` before the next may be due (its
    own ``delay`` comes on top), so that sweeps take at most ``share`` of the time."""
    return max(0.0, cpu_seconds / share - delay)


class GarbageSweep:
    """Counts connection ends (:meth:`ended`, given to the HTTP protocol) and runs a full
    collection ``delay`` seconds after the first end since the last one (:meth:`run`), spaced
    further when collections are costly (:func:`rest_after`)."""

    def __init__(self, delay: float = GC_SWEEP_DELAY, max_cpu_share: float = MAX_CPU_SHARE) -> None:
        self.delay = delay
        self.max_cpu_share = max_cpu_share
        self._due = asyncio.Event()
        self.ends = 0
        """Connections ended since the last sweep."""
        self.sweeps = 0
        self.seconds = 0.0
        """Time spent in the sweeps' collections."""

    def ended(self) -> None:
        self.ends += 1
        self._due.set()

    async def run(self) -> None:
        while True:
            await self._due.wait()
            await asyncio.sleep(self.delay)
            self._due.clear()
            ends, self.ends = self.ends, 0
            started, cpu = time.perf_counter(), time.process_time()
            freed = gc.collect()
            took = time.perf_counter() - started
            cpu = time.process_time() - cpu
            self.sweeps += 1
            self.seconds += took
            log.debug(
                "gc_sweep",
                ended=ends,
                freed=freed,
                ms=round(took * 1000, 1),
                cpu_ms=round(cpu * 1000, 1),
            )
            rest = rest_after(cpu, self.delay, self.max_cpu_share)
            if rest:
                await asyncio.sleep(rest)
