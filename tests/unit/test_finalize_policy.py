"""The recording-finalize retry's pure rules: reading the status service's answer, and what
becomes of the recording after each ask."""

import pytest

from realtime_dispatch.messenger.jobs.finalize_policy import (
    Answer,
    AskResult,
    Decision,
    Verdict,
    decide,
    parse_answer,
)

R = AskResult


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (200, b'{"status": "ready"}', Answer(R.READY)),
        (200, b'{"status": "processing"}', Answer(R.PROCESSING)),
        (
            200,
            b'{"status": "failed", "code": "Transcode.Error"}',
            Answer(R.FAILED, "Transcode.Error"),
        ),
        (200, b'{"status": "failed"}', Answer(R.FAILED, "MediaPipelineFailed")),
        # A code is stored and pushed: free text (or worse) is never taken over.
        (
            200,
            b'{"status": "failed", "code": "disk full at /srv"}',
            Answer(R.FAILED, "MediaPipelineFailed"),
        ),
        (200, b'{"status": "failed", "code": 7}', Answer(R.FAILED, "MediaPipelineFailed")),
        (200, b'{"status": "done"}', Answer(R.UNREACHABLE, "UnknownStatus")),
        (200, b'["ready"]', Answer(R.UNREACHABLE, "UnknownStatus")),
        (200, b"ready", Answer(R.UNREACHABLE, "InvalidJson")),
        (404, b'{"status": "ready"}', Answer(R.UNREACHABLE, "Http404")),
        (503, b"", Answer(R.UNREACHABLE, "Http503")),
    ],
)
def test_answers_are_read_strictly(status: int, body: bytes, expected: Answer) -> None:
    assert parse_answer(status, body) == expected


def test_ready_and_failed_settle_at_once_whatever_the_attempt() -> None:
    for attempts in (1, 8, 20):
        assert decide(Answer(R.READY), attempts=attempts, max_attempts=8) == Decision(
            Verdict.AVAILABLE
        )
        assert decide(Answer(R.FAILED, "X"), attempts=attempts, max_attempts=8) == Decision(
            Verdict.FAILED, "X"
        )


@pytest.mark.parametrize("result", [R.PROCESSING, R.UNREACHABLE])
def test_no_answer_waits_until_the_last_allowed_ask(result: AskResult) -> None:
    assert decide(Answer(result), attempts=1, max_attempts=3).verdict is Verdict.WAIT
    assert decide(Answer(result), attempts=2, max_attempts=3).verdict is Verdict.WAIT
    assert decide(Answer(result), attempts=3, max_attempts=3) == Decision(
        Verdict.FAILED, "FinalizeTimeout"
    )
    assert decide(Answer(result), attempts=1, max_attempts=1) == Decision(
        Verdict.FAILED, "FinalizeTimeout"
    )
