"""Why an owner command refused. Each class names its status code, which the REST layer
answers with (``realtime_dispatch.messenger.api.error_responses``); messages are short and carry
no ids or bodies.

::

    RealtimeDispatchError › Refusal (realtime_dispatch.errors: code, message, status, retry_after)
    └── DomainError
        ├── InvalidInput     400  the request cannot be valid (seq beyond the chat, self-call, …)
        ├── Forbidden        403  the actor may not do this (not a member, blocked, not the sender)
        ├── NotFound         404  no such record, or not visible to the actor
        ├── Conflict         409  the record is not in a state that allows it (window passed, …)
        ├── RateLimited      429  past the sender's rate; ``retry_after`` says when to come back
        └── MediaUnavailable 503  join credentials asked for, but no media secret is configured
"""

from __future__ import annotations

from realtime_dispatch.errors import Refusal


class DomainError(Refusal, code="Domain"):
    """A command refused: the REST layer answers with the class's ``status``."""


class InvalidInput(DomainError, status=400, code="InvalidInput"): ...


class NotFound(DomainError, status=404, code="NotFound"): ...


class Forbidden(DomainError, status=403, code="Forbidden"): ...


class Conflict(DomainError, status=409, code="Conflict"): ...


class RateLimited(DomainError, status=429, code="TooManyRequests"):
    retry_after: float

    def __init__(self, message: str, *, retry_after: float) -> None:
        super().__init__(message, retry_after=retry_after)


class MediaUnavailable(DomainError, status=503, code="MediaUnavailable"): ...
