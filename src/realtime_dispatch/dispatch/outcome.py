"""What happens to a claimed row: pure functions from the build and publish results to each
row's outcome (no I/O, no logging, no metrics: :mod:`.observer` reports what was decided).

A batch goes through :func:`screen` (rows past their attempts), :func:`split_built` (payloads
built or not), :func:`sort_published` (pushed, failed, or never sent), and :func:`classify`
(the verdicts, and the :class:`~realtime_dispatch.outbox.store.Outcomes` to write)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import assert_never
from uuid import UUID

from realtime_dispatch.delivery.push import NotPushed, PublishResult, Push
from realtime_dispatch.errors import (
    PayloadBuildError,
    PermanentError,
    RealtimeDispatchError,
    TargetGone,
)
from realtime_dispatch.outbox.model import ClaimedRow
from realtime_dispatch.outbox.store import Outcomes


class Verdict(Enum):
    DONE = "done"
    RETRY = "retry"
    QUARANTINE = "quarantine"
    GONE = "gone"  # Done without a push: the target no longer exists


@dataclass(frozen=True, slots=True)
class Decision:
    verdict: Verdict
    last_error: str | None


def decide(error: RealtimeDispatchError | None, *, attempts: int, max_attempts: int) -> Decision:
    """Done on success; a permanent error quarantines at once; a transient one retries until
    ``attempts`` (already counting this one) reaches ``max_attempts``."""
    if error is None:
        return Decision(Verdict.DONE, None)
    described = error.describe()
    if isinstance(error, TargetGone):
        return Decision(Verdict.GONE, described)
    if isinstance(error, PermanentError):
        return Decision(Verdict.QUARANTINE, described)
    # A transient error, or anything we did not classify: retry, bounded by max_attempts.
    return Decision(Verdict.QUARANTINE if attempts >= max_attempts else Verdict.RETRY, described)


def exhausted_before_push(attempts: int, max_attempts: int) -> bool:
    """A row claimed with more attempts than allowed never got an outcome written for its last
    attempt (the worker died while handling it, repeatedly): quarantine it rather than let a
    row that crashes the worker loop forever."""
    return attempts > max_attempts


def verdict_label(verdict: Verdict) -> str:
    match verdict:
        case Verdict.DONE:
            return "dispatched"
        case Verdict.RETRY:
            return "retried"
        case Verdict.QUARANTINE:
            return "quarantined"
        case Verdict.GONE:
            return "target_gone"
        case _:
            assert_never(verdict)


Errors = dict[UUID, RealtimeDispatchError]


def screen(rows: Iterable[ClaimedRow], max_attempts: int) -> tuple[list[ClaimedRow], Errors]:
    """The rows worth building, and an error for each row claimed past its attempts."""
    live: list[ClaimedRow] = []
    errors: Errors = {}
    for row in rows:
        if exhausted_before_push(row.attempts, max_attempts):
            errors[row.id] = PayloadBuildError(
                "attempts exhausted without a recorded outcome", code="AttemptsExhausted"
            )
        else:
            live.append(row)
    return live, errors


def split_built(
    rows: Iterable[ClaimedRow], built: Mapping[UUID, Push | RealtimeDispatchError]
) -> tuple[list[tuple[ClaimedRow, Push]], Errors]:
    """The rows with a payload to push (in claim order), and the build error of the others."""
    pushes: list[tuple[ClaimedRow, Push]] = []
    errors: Errors = {}
    for row in rows:
        result = built[row.id]
        if isinstance(result, Push):
            pushes.append((row, result))
        else:
            errors[row.id] = result
    return pushes, errors


def sort_published(
    part: Sequence[tuple[ClaimedRow, Push]], results: Sequence[PublishResult]
) -> tuple[list[ClaimedRow], list[ClaimedRow], Errors]:
    """A published slice: the rows that have an outcome now (pushed, or failed with the error
    returned), and the rows never sent (:class:`NotPushed`: given back, due at once)."""
    settled: list[ClaimedRow] = []
    late: list[ClaimedRow] = []
    errors: Errors = {}
    for (row, _), published in zip(part, results, strict=True):
        if isinstance(published, NotPushed):
            late.append(row)
            continue
        if published is not None:
            errors[row.id] = published
        settled.append(row)
    return settled, late, errors


@dataclass(frozen=True, slots=True)
class Decided:
    """A row that did not simply succeed: its verdict, the error and the reason stored."""

    row: ClaimedRow
    verdict: Verdict
    error: RealtimeDispatchError
    last_error: str


@dataclass(slots=True)
class Classification:
    """A slice's rows by verdict, in claim order."""

    done: list[ClaimedRow] = field(default_factory=list)
    retry: list[Decided] = field(default_factory=list)
    quarantine: list[Decided] = field(default_factory=list)
    gone: list[Decided] = field(default_factory=list)

    @property
    def size(self) -> int:
        return len(self.done) + len(self.retry) + len(self.quarantine) + len(self.gone)

    def outcomes(self) -> Outcomes:
        """The status writes, each guarded by the row_version of the claim."""
        return Outcomes(
            done=[(row.id, row.row_version) for row in self.done],
            retry=[(d.row.id, d.row.row_version, d.last_error) for d in self.retry],
            quarantine=[(d.row.id, d.row.row_version, d.last_error) for d in self.quarantine],
            gone=[(d.row.id, d.row.row_version, d.last_error) for d in self.gone],
        )


def classify(
    rows: Iterable[ClaimedRow], errors: Mapping[UUID, RealtimeDispatchError], *, max_attempts: int
) -> Classification:
    """Each row's verdict (:func:`decide`): no error is Done."""
    result = Classification()
    by_verdict = {
        Verdict.RETRY: result.retry,
        Verdict.QUARANTINE: result.quarantine,
        Verdict.GONE: result.gone,
    }
    for row in rows:
        error = errors.get(row.id)
        if error is None:
            result.done.append(row)
            continue
        decision = decide(error, attempts=row.attempts, max_attempts=max_attempts)
        by_verdict[decision.verdict].append(
            Decided(row, decision.verdict, error, decision.last_error or "")
        )
    return result
