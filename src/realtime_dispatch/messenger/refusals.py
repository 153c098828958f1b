"""Why an owner command refused. The REST layer maps each class to one status code
(``realtime_dispatch.messenger.api.error_responses``); messages are short and carry no ids or
bodies.

::

    RealtimeDispatchError
    └── DomainError
        ├── InvalidInput     400  the request cannot be valid (seq beyond the chat, self-call, …)
        ├── Forbidden        403  the actor may not do this (not a member, blocked, not the sender)
        ├── NotFound         404  no such record, or not visible to the actor
        ├── Conflict         409  the record is not in a state that allows it (window passed, …)
        ├── RateLimited      429  past the sender's rate; ``retry_after`` says when to come back
        └── MediaUnavailable 503  join credentials asked for, but no media secret is configured
"""

from __future__ import annotations

from realtime_dispatch.errors import RealtimeDispatchError


class DomainError(RealtimeDispatchError):
    """A command refused: the REST layer maps the class to a status."""

    code = "Domain"


class InvalidInput(DomainError):
    code = "InvalidInput"


class NotFound(DomainError):
    code = "NotFound"


class Forbidden(DomainError):
    code = "Forbidden"


class Conflict(DomainError):
    code = "Conflict"


class RateLimited(DomainError):
    code = "TooManyRequests"

    def __init__(self, message: str, *, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class MediaUnavailable(DomainError):
    code = "MediaUnavailable"
