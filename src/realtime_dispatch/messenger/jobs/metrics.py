"""The scheduled jobs' Prometheus metrics (the call-timeout reaper and the media lifecycle
jobs), on a registry the caller owns. Labels are bounded: the job's name, a reason, a result;
never an id."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

CALL_REAPER = "call-timeout-reaper"
CONFERENCE_REAPER = "conference-room-reaper"
RECORDING_FINALIZE = "recording-finalize-retry"
JOB_NAMES = (CALL_REAPER, CONFERENCE_REAPER, RECORDING_FINALIZE)
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class MediaJobMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.runs = Counter(
            "messenger_realtime_job_runs",
            "Runs of a media lifecycle job by result (ran, skipped_locked, failed, lease_expired).",
            ["job", "result"],
            registry=registry,
        )
        self.duration = Histogram(
            "messenger_realtime_job_duration_seconds",
            "Duration of a media lifecycle job's run that held its lock.",
            ["job"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.enabled = Gauge(
            "messenger_realtime_job_enabled",
            "1 in a process that runs the job (whether or not it holds the job's lock now).",
            ["job"],
            registry=registry,
        )
        self.last_run = Gauge(
            "messenger_realtime_job_last_run_timestamp_seconds",
            "Unix time of the job's last run that held its lock and completed.",
            ["job"],
            registry=registry,
        )
        self.calls_reaped = Counter(
            "messenger_realtime_call_reaped",
            "Calls the call-timeout reaper ended, by reason (missed: rang out; overlong).",
            ["reason"],
            registry=registry,
        )
        self.reaped = Counter(
            "messenger_realtime_conference_reaped",
            "Conferences ended by the conference-room reaper, by reason (empty, overlong).",
            ["reason"],
            registry=registry,
        )
        self.finalize_retried = Counter(
            "messenger_realtime_recording_finalize_retried",
            "Status asks of the recording-finalize retry, by answer"
            " (ready, processing, failed, unreachable).",
            ["result"],
            registry=registry,
        )
        self.finalized = Counter(
            "messenger_realtime_recording_finalized",
            "Recordings the finalize retry settled, by outcome (available, failed, timeout).",
            ["outcome"],
            registry=registry,
        )
