"""The feed's hints read again: :class:`HintRereads`.

A membership notification without ``active`` is a hint: the user's ``member_chats`` are read
again, hints that come together sharing one query (up to ``LOAD_BATCH`` users each). A change
counts as applied only once its re-read is: :meth:`HintRereads.applied` waits for the re-reads
of the hints heard so far, and a barrier token (a mark) heard while hints are pending is held
(:meth:`HintRereads.hold`) until they are applied. A re-read that fails drops every hint in
flight and reports the failure (the feed then reconnects, and so resyncs every connected user).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Awaitable, Callable, Iterable

import structlog

from realtime_dispatch.hub.membership.loads import LOAD_BATCH
from realtime_dispatch.hub.membership.tracker import MembershipTracker
from realtime_dispatch.values.keys import Key

log = structlog.get_logger(__name__)

MemberChats = Callable[[list[Key]], Awaitable[Iterable[tuple[Key, Key]]]]
"""The ``member_chats`` query: user ids → ``(user_id, chat_id)`` of their active memberships."""


class HintRereads:
    """Hinted users to read again, the count of hints heard and of those applied, and what
    waits for them (barrier callers, barrier tokens), each with the count it needs."""

    __slots__ = (
        "_applied",
        "_fetch",
        "_heard",
        "_held_tokens",
        "_hinted",
        "_on_failure",
        "_on_token",
        "_rereader",
        "_tracker",
        "_waiters",
        "queries",
    )

    def __init__(
        self,
        tracker: MembershipTracker,
        fetch: MemberChats,
        *,
        on_token: Callable[[str], None],
        on_failure: Callable[[], None],
    ) -> None:
        self._tracker = tracker
        self._fetch = fetch
        self._on_token = on_token
        """Told a held barrier token once the hints heard before it are applied."""
        self._on_failure = on_failure
        """Told a re-read failed (the hints are dropped already)."""
        self._hinted: dict[Key, int] = {}  # user → the count of hints heard at its latest
        self._heard = 0
        self._applied = 0
        self._waiters: list[tuple[int, asyncio.Future[bool]]] = []
        self._held_tokens: list[tuple[int, str]] = []
        self._rereader: asyncio.Task[None] | None = None
        self.queries = 0
        """``member_chats`` queries run for hints (one per batch of hinted users)."""

    def hint(self, user_id: Key) -> None:
        """A hint for ``user_id``: read them again (in the running batch's next query)."""
        if not self._tracker.hint(user_id):
            return  # nobody of that user here: their next connection reads them anyway
        self._heard += 1
        self._hinted[user_id] = self._heard
        if self._rereader is None:
            self._rereader = asyncio.create_task(self._reread(), name="hub-membership-hints")

    def hold(self, token: str) -> bool:
        """Hold a barrier token until the hints heard before it are applied; False (not
        held) when none is pending."""
        if self._applied >= self._heard:
            return False
        self._held_tokens.append((self._heard, token))
        return True

    async def applied(self) -> bool:
        """Wait until every hint heard so far is applied; False if they were dropped."""
        if self._applied >= self._heard:
            return True
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiters.append((self._heard, future))
        return await future

    def drop(self) -> None:
        """Forget the hints in flight (the session ended, or a re-read failed): who waits for
        them is told no, and the next session's resync reads every connected user."""
        self._hinted.clear()
        self._applied = self._heard
        self._held_tokens.clear()
        waiting, self._waiters = self._waiters, []
        for _, future in waiting:
            if not future.done():
                future.set_result(False)

    async def stop(self) -> None:
        """Drop the hints and end the re-read under way, if any."""
        self.drop()
        rereader = self._rereader
        if rereader is not None:
            rereader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await rereader

    async def _reread(self) -> None:
        """Read the hinted users again, a batch per query, until none is left."""
        tracker = self._tracker
        try:
            while self._hinted:
                users = list(itertools.islice(self._hinted, LOAD_BATCH))
                for user in users:
                    del self._hinted[user]
                token = tracker.begin_load()
                self.queries += 1
                try:
                    rows = await self._fetch(users)
                except BaseException:
                    tracker.cancel_load(token)
                    raise
                tracker.finish_load(token, rows, users=users)
                # Every hint before the oldest still queued is applied (a user hinted during
                # the query is queued again: that query's answer was left out for them).
                waiting = min(self._hinted.values(), default=self._heard + 1)
                self._settled(waiting - 1)
        except Exception as exc:  # any failure: reconnect, and so resync
            # What the hinted users are now is unknown: reconnect, which resyncs everyone.
            log.warning("membership_hint_failed", error=type(exc).__name__)
            self.drop()
            self._on_failure()
        finally:
            self._rereader = None

    def _settled(self, count: int) -> None:
        count = self._applied = max(count, self._applied)
        waiting, self._waiters = self._waiters, []
        for needed, future in waiting:
            if needed <= count:
                if not future.done():
                    future.set_result(True)
            else:
                self._waiters.append((needed, future))
        held, self._held_tokens = self._held_tokens, []
        for needed, token in held:
            if needed <= count:
                self._on_token(token)
            else:
                self._held_tokens.append((needed, token))
