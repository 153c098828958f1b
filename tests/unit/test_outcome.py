from realtime_dispatch.dispatch.outcome import (
    Decision,
    Verdict,
    decide,
    exhausted_before_push,
    verdict_label,
)
from realtime_dispatch.errors import (
    DatabaseUnavailable,
    HubUnavailable,
    PayloadBuildError,
    PushRejected,
    RealtimeDispatchError,
    TargetGone,
)


def test_success_is_done_and_clears_error() -> None:
    d = decide(None, attempts=3, max_attempts=8)
    assert d.verdict is Verdict.DONE
    assert d.last_error is None


def test_transient_retries_until_max_attempts() -> None:
    err = HubUnavailable("down", code="Unreachable")
    assert decide(err, attempts=7, max_attempts=8).verdict is Verdict.RETRY
    assert decide(err, attempts=8, max_attempts=8).verdict is Verdict.QUARANTINE
    assert decide(DatabaseUnavailable("x"), attempts=1, max_attempts=8).verdict is Verdict.RETRY


def test_permanent_quarantines_at_once_with_reason() -> None:
    d = decide(PayloadBuildError("gone", code="MessageNotFound"), attempts=1, max_attempts=8)
    assert d.verdict is Verdict.QUARANTINE
    assert d.last_error == "PayloadBuildError:MessageNotFound: gone"
    assert decide(PushRejected("400"), attempts=1, max_attempts=8).verdict is Verdict.QUARANTINE


def test_unclassified_error_is_bounded_like_transient() -> None:
    err = RealtimeDispatchError("?")
    assert decide(err, attempts=1, max_attempts=2).verdict is Verdict.RETRY
    assert decide(err, attempts=2, max_attempts=2).verdict is Verdict.QUARANTINE


def test_last_error_fits_column() -> None:
    d = decide(HubUnavailable("x" * 2000), attempts=1, max_attempts=8)
    assert d.last_error is not None
    assert len(d.last_error) == 512


def test_exhausted_before_push() -> None:
    assert not exhausted_before_push(8, 8)
    assert exhausted_before_push(9, 8)


def test_a_gone_target_is_done_with_its_reason_never_quarantined() -> None:
    d = decide(TargetGone("chat deleted", code="ChatGone"), attempts=8, max_attempts=8)
    assert d == Decision(Verdict.GONE, "TargetGone:ChatGone: chat deleted")
    assert verdict_label(d.verdict) == "target_gone"
