"""The initial ``chat:`` groups of connections opening: :class:`ConnectionLoads`.

Connections opening together share one ``member_chats`` query: those that ask while one runs
are loaded by the next, up to ``LOAD_BATCH`` users each (a replica taking back thousands of
clients at once runs a few dozen queries, not one per client).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable

from realtime_dispatch.hub.membership.tracker import MembershipTracker
from realtime_dispatch.values.keys import Key

LOAD_BATCH = 1000
"""Users per ``member_chats`` query for connections opening together (or hints re-read)."""

_Waiting = tuple[str, Key, "asyncio.Future[None]"]


class ConnectionLoads:
    __slots__ = ("_fetch", "_loader", "_tracker", "_waiting", "queries")

    def __init__(
        self,
        tracker: MembershipTracker,
        fetch: Callable[[list[Key]], Awaitable[Iterable[tuple[Key, Key]]]],
    ) -> None:
        self._tracker = tracker
        self._fetch = fetch
        self._waiting: list[_Waiting] = []
        self._loader: asyncio.Task[None] | None = None
        self.queries = 0
        """``member_chats`` queries run for connections opening (one per batch of them)."""

    async def load(self, connection_id: str, user_id: Key) -> None:
        """Join a registered connection to its user's active chats (raises on DB errors)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((connection_id, user_id, future))
        if self._loader is None:
            self._loader = asyncio.create_task(self._load_waiting(), name="hub-membership-load")
        await future

    async def _load_waiting(self) -> None:
        try:
            while self._waiting:
                batch = self._waiting[:LOAD_BATCH]
                del self._waiting[:LOAD_BATCH]
                await self._load(batch)
        finally:
            self._loader = None

    async def _load(self, batch: list[_Waiting]) -> None:
        users = list({user_id for _, user_id, _ in batch})
        token = self._tracker.begin_load()
        self.queries += 1
        try:
            rows = await self._fetch(users)
        except Exception as exc:
            self._tracker.cancel_load(token)
            for *_, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        except BaseException:
            self._tracker.cancel_load(token)
            for *_, future in batch:
                future.cancel()
            raise
        # a connection that went away meanwhile is no longer registered: it is skipped
        self._tracker.finish_load(
            token, rows, users=users, connections=[connection_id for connection_id, _, _ in batch]
        )
        for *_, future in batch:
            if not future.done():
                future.set_result(None)
