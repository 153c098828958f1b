"""The recording-finalize retry's pure rules: what the status service's answer means, and what
becomes of the recording after an ask. No I/O here.

The status service answers ``GET {url}/{recordingId}`` with ``{"status": "ready" |
"processing" | "failed", "code"?}``. Anything else (no answer, an error status, a body that is
not that) is ``unreachable``: counted like ``processing``, logged by its cause.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import orjson

from realtime_dispatch.messenger.recordings import FAILURE_CODE

FINALIZE_TIMEOUT_CODE = "FinalizeTimeout"
UNSPECIFIED_FAILURE_CODE = "MediaPipelineFailed"
"""The code of a ``failed`` answer without a usable ``code``."""


class AskResult(enum.StrEnum):
    READY = "ready"
    PROCESSING = "processing"
    FAILED = "failed"
    UNREACHABLE = "unreachable"


@dataclass(frozen=True, slots=True)
class Answer:
    result: AskResult
    code: str | None = None
    """``failed``: the failure code; ``unreachable``: why (an error class or status)."""


def parse_answer(status_code: int, body: bytes) -> Answer:
    """The status service's reply, read strictly: only a 200 with the documented body counts."""
    if status_code != 200:
        return Answer(AskResult.UNREACHABLE, f"Http{status_code}")
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return Answer(AskResult.UNREACHABLE, "InvalidJson")
    status = data.get("status") if isinstance(data, dict) else None
    if status == "ready":
        return Answer(AskResult.READY)
    if status == "processing":
        return Answer(AskResult.PROCESSING)
    if status == "failed":
        code = data.get("code")
        if not isinstance(code, str) or not FAILURE_CODE.match(code):
            code = UNSPECIFIED_FAILURE_CODE  # a code is stored and pushed: never free text
        return Answer(AskResult.FAILED, code)
    return Answer(AskResult.UNREACHABLE, "UnknownStatus")


class Verdict(enum.Enum):
    AVAILABLE = "available"
    FAILED = "failed"
    WAIT = "wait"
    """Still Stopped; the claim already set when the next ask is due."""


@dataclass(frozen=True, slots=True)
class Decision:
    verdict: Verdict
    code: str | None = None


def decide(answer: Answer, *, attempts: int, max_attempts: int) -> Decision:
    """After ask number ``attempts``: ready → Available, failed → Failed with its code; no
    answer yet on the last allowed ask → Failed with ``FinalizeTimeout``; else wait."""
    if answer.result is AskResult.READY:
        return Decision(Verdict.AVAILABLE)
    if answer.result is AskResult.FAILED:
        return Decision(Verdict.FAILED, answer.code)
    if attempts >= max_attempts:
        return Decision(Verdict.FAILED, FINALIZE_TIMEOUT_CODE)
    return Decision(Verdict.WAIT)
