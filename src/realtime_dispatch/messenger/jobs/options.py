"""The media lifecycle jobs' options, as values (read from the environment by
:mod:`realtime_dispatch.settings`, which validates them at start: finite and positive, exit 2
naming the variable). Durations in seconds."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from realtime_dispatch.errors import ConfigurationError
from realtime_dispatch.outbox.backoff import Backoff

CONFERENCE_EMPTY_TIMEOUT_SECONDS = 300.0
CONFERENCE_MAX_DURATION_SECONDS = 8 * 3600.0
RECORDING_FINALIZE_MAX_ATTEMPTS = 8
RECORDING_FINALIZE_TIMEOUT_SECONDS = 600.0
JOB_INTERVAL_SECONDS = 5.0
"""Between runs of each job (the call-timeout reaper's interval); the alert fires after 60 s
without a run."""
JOB_BATCH_SIZE = 50
JOB_PAUSE_FACTOR = 3.0
"""A backlog is swept in batches of 50 with a rest of 3× each batch's time after it: the jobs
work at most a quarter of the time, so the dispatcher's lag beside a sweep stays within its
own spread (docs/BENCHMARKS.md, "The dispatcher's lag while the jobs sweep")."""


@dataclass(frozen=True, slots=True)
class JobSchedule:
    """How a job runs: its lock lease and the length of one run are the dispatcher's
    (``REALTIME_DISPATCH_LOCK_TTL``, ``…_MAX_RUN_DURATION`` below the lease); its batches and
    the rest after each full one are its own (``REALTIME_MEDIA_JOBS_BATCH_SIZE``,
    ``REALTIME_MEDIA_JOBS_PAUSE_FACTOR``)."""

    lock_ttl: float
    max_run_duration: float
    interval: float = JOB_INTERVAL_SECONDS
    batch_size: int = JOB_BATCH_SIZE
    pause: float = JOB_PAUSE_FACTOR
    """After a full batch, this many times its duration (:meth:`JobRun.rest`); 0: none."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.interval) and self.interval > 0):
            raise ValueError("interval: must be a finite number > 0")  # not an environment knob
        _positive("DISPATCH_LOCK_TTL", self.lock_ttl)
        _positive("DISPATCH_MAX_RUN_DURATION", self.max_run_duration)
        if self.max_run_duration >= self.lock_ttl:
            raise ConfigurationError(
                "REALTIME_DISPATCH_MAX_RUN_DURATION", "must be below REALTIME_DISPATCH_LOCK_TTL"
            )
        if self.batch_size < 1:
            raise ConfigurationError("REALTIME_MEDIA_JOBS_BATCH_SIZE", "must be > 0")
        if not (math.isfinite(self.pause) and self.pause >= 0):
            raise ConfigurationError(
                "REALTIME_MEDIA_JOBS_PAUSE_FACTOR", "must be a finite number >= 0"
            )


@dataclass(frozen=True, slots=True)
class ConferenceReaperOptions:
    empty_timeout: float = CONFERENCE_EMPTY_TIMEOUT_SECONDS
    """A live conference with nobody in its room this long is ended."""
    max_duration: float = CONFERENCE_MAX_DURATION_SECONDS
    """A live conference started this long ago is ended, occupied or not."""

    def __post_init__(self) -> None:
        _positive("CONFERENCE_EMPTY_TIMEOUT", self.empty_timeout)
        _positive("CONFERENCE_MAX_DURATION", self.max_duration)


@dataclass(frozen=True, slots=True)
class RecordingFinalizeOptions:
    status_url: str | None = None
    """``GET {status_url}/{recordingId}`` asks the media pipeline; None: nobody to ask, and a
    recording still Stopped ``timeout`` seconds after its stop fails with FinalizeTimeout."""
    max_attempts: int = RECORDING_FINALIZE_MAX_ATTEMPTS
    timeout: float = RECORDING_FINALIZE_TIMEOUT_SECONDS
    backoff: Backoff = field(default_factory=Backoff)
    """Between asks: the dispatcher's ``REALTIME_DISPATCH_BACKOFF_*``."""

    def __post_init__(self) -> None:
        if self.status_url is not None:
            problem = status_url_problem(self.status_url)
            if problem is not None:
                raise ConfigurationError("REALTIME_MEDIA_RECORDING_STATUS_URL", problem)
        if self.max_attempts < 1:
            raise ConfigurationError("REALTIME_RECORDING_FINALIZE_MAX_ATTEMPTS", "must be > 0")
        _positive("RECORDING_FINALIZE_TIMEOUT", self.timeout)


def status_url_problem(url: str) -> str | None:
    """Why ``url`` cannot be the status service's base URL, or None."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "not a URL"
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        return "must be an http:// or https:// URL"
    if parts.query or parts.fragment:
        return "must not have a query or a fragment (the recording id is appended)"
    return None


def _positive(name: str, value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        raise ConfigurationError(f"REALTIME_{name}", "must be a finite number > 0")
