"""What happens to a claimed row after its push: a pure decision on the error's type."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import assert_never

from realtime_dispatch.errors import (
    PermanentError,
    RealtimeDispatchError,
    TargetGone,
    TransientError,
)


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
    if isinstance(error, TransientError):
        return Decision(
            Verdict.QUARANTINE if attempts >= max_attempts else Verdict.RETRY, described
        )
    # Anything else we did not classify: retry it like a transient error, bounded the same way.
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
