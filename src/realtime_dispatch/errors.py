"""The one exception root of the package, and how failures are classified.

::

    RealtimeDispatchError
    ├── Refusal                       a request refused with an HTTP status (REST API):
    │                                 ``code``, message, ``status``, ``retry_after``; the
    │                                 messenger's DomainError raises it, the SDK's RestError
    │                                 reads it back
    ├── ConfigurationError            invalid settings; the process stops with one line
    ├── SchemaConflict                a migration met an existing object of the same name
    ├── IntentError                   an owner asked to enqueue an intent that cannot be valid
    ├── TargetGone                    the row's target no longer exists (its chat was deleted):
    │                                 nothing to deliver and nothing wrong; Done with the reason
    ├── TransientError                worth retrying after backoff; the row stays Pending
    │   ├── HubUnavailable            hub / backplane / HTTP push target down, 5xx, timeout
    │   └── DatabaseUnavailable       PostgreSQL connection lost or refused
    └── PermanentError                retrying cannot help; the row is quarantined at once
        ├── PayloadBuildError         referenced entity gone, row that cannot be built
        └── PushRejected              the hub refused the push (4xx other than 429)

The dispatcher decides retry versus quarantine by type only, never by message text. Every
error carries a short ``code`` that is safe to store in ``last_error`` (no ids, no bodies).
"""

from __future__ import annotations

from typing import Any


class RealtimeDispatchError(Exception):
    """Root of every error this package raises on purpose."""

    code: str = "Error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    def __init_subclass__(cls, *, code: str | None = None, **kwargs: Any) -> None:
        """A subclass names its code where it is declared (``class TargetGone(…,
        code="TargetGone")``), as a :class:`Refusal` names its status."""
        super().__init_subclass__(**kwargs)
        if code is not None:
            cls.code = code

    def describe(self) -> str:
        """``Class:code: message`` for ``last_error`` (callers keep messages free of PII)."""
        return f"{type(self).__name__}:{self.code}: {self}"[:512]


class Refusal(RealtimeDispatchError):
    """A request refused, as the REST API answers it: ``status``, and the body
    ``{"error": code, "message": str(self)}``, with ``Retry-After`` when ``retry_after`` is set.
    A subclass names its status beside its code (``class NotFound(Refusal, status=404,
    code="NotFound")``); the client's view of an answer carries the status it got."""

    status: int = 400
    retry_after: float | None = None
    """Seconds until the refused request may be tried again (429), when known."""

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, code=code)
        if status is not None:
            self.status = status
        self.retry_after = retry_after

    def __init_subclass__(cls, *, status: int | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if status is not None:
            cls.status = status


class ConfigurationError(RealtimeDispatchError, code="InvalidSetting"):
    """A setting is invalid. ``variable`` names the environment variable."""

    def __init__(self, variable: str, message: str) -> None:
        super().__init__(f"{variable}: {message}")
        self.variable = variable


class SchemaConflict(RealtimeDispatchError, code="SchemaConflict"):
    """A migration would create an object that exists already (an adopter's own table named
    like one of ours): nothing of that migration was applied; the process stops with one line."""


class IntentError(RealtimeDispatchError, ValueError, code="InvalidIntent"):
    """An outbox intent is malformed (wrong ids for its kind, bad target)."""


class TargetGone(RealtimeDispatchError, code="TargetGone"):
    """The row's audience is gone (a deleted chat took its messages and sessions with it): not
    poison, so no quarantine and no alert; the row is Done with this as its recorded reason."""


class TransientError(RealtimeDispatchError, code="Transient"):
    """Retry after backoff."""


class HubUnavailable(TransientError, code="HubUnavailable"): ...


class DatabaseUnavailable(TransientError, code="DatabaseUnavailable"): ...


class PermanentError(RealtimeDispatchError, code="Permanent"):
    """Quarantine at once."""


class PayloadBuildError(PermanentError, code="PayloadBuild"): ...


class PushRejected(PermanentError, code="PushRejected"): ...
