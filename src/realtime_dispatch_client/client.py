"""``MessengerClient``: the hub connection, the REST API and the per-chat timelines together.

Every event, from the hub or from a sync page, goes through one dedupe: by ``eventId``
(:class:`~realtime_dispatch_client.seen.SeenEvents`), then
:func:`~realtime_dispatch_client.apply.apply_event` by ``(chatId, seq)``. A copy of something
already seen is dropped (counted, reported to ``on_duplicate``), anything new goes to the typed
callbacks. A seq gap and :meth:`MessengerClient.resync` fetch the missing messages over REST
(``afterSeq``), one fetch per chat at a time (requests that arrive meanwhile are coalesced into
one more round).

Resume: the client keeps the sync cursor (:attr:`MessengerClient.cursor`). The first connect
takes a cursor, then runs the full resync (``GET /api/chats`` and each chat's history), so
nothing between the two is lost. Every reconnect after that reads ``GET /api/sync`` from the
cursor, page by page, applies what it missed through the same dedupe and tells
``on_resumed``; only an answer ``limited`` (the cursor is older than what the server retains)
falls back to the full resync. So a timeline ends complete and duplicate-free whatever the hub
did: lost, repeated or reordered pushes, drops, restarts.

The cursor keeps up during a session: after ``cursor_every`` live events, or once the stream
has been quiet for ``cursor_idle`` seconds after some, the client reads on from its cursor in
the background (a keep-up read: the same pages, the same dedupe, what it reads came live
already and is dropped). So a reconnect reads what it missed plus at most what came since the
last keep-up read, never the whole session, and a session outlives the outbox's retention. The
position comes from the sync read itself, not from the pushes: only a sync page knows the
commit-safe horizon (a row still pending, retried or in a transaction still open, is served by
the page that passes it, or holds the cursor back), so a cursor that moves only by reading can
never skip a row.

On a deployment without the reference messenger's REST API (``hub`` on an adopter's schema),
the application passes ``resync``, its own full resync, and the client then never calls
``/api/chats…``: it resumes through ``GET /api/sync`` alone (a seq gap reads on from the
cursor), and calls ``resync(reason)`` where the cursor cannot carry it: ``"start"`` (the first
cursor was just taken: load what came before it), ``"limited"`` (the server no longer holds
what came after the cursor) and ``"sync_off"`` (the server has no ``GET /api/sync``: on every
connect). A chat first seen live (its first event is a push, or in a resume's page) is not a
gap: its timeline starts at that event, and a hook that takes a second parameter is asked
``resync("new_chat", chat_id)`` (never sync) to seed it from the application's own history with
:meth:`MessengerClient.seed`.

Events of a name the SDK has no model for (an application's own declared kinds, such as
``reaction_added``) reach ``on("reaction_added", callback)`` as
:class:`~realtime_dispatch_client.events.AppEvent`, through the same dedupe by ``eventId``, the
same resume and in the same order as the built-in events.

Background work (the connection, resyncs) runs in a task group owned by the ``async with``
block; an exception in a callback stops the client and comes out of the block.
"""

from __future__ import annotations

import asyncio
import inspect
import random
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, Self, TypeVar, overload
from uuid import UUID

import httpx
import structlog

from realtime_dispatch.contracts.base import Contract, key_context
from realtime_dispatch.contracts.messages import MessageReceived
from realtime_dispatch.contracts.messenger_rest import ChatSummaryOut
from realtime_dispatch.contracts.signals import PresenceChanged
from realtime_dispatch.contracts.sync import SyncPageOut
from realtime_dispatch.values.keys import KEY_TYPES, UUID_KEYS, Key, key_codec
from realtime_dispatch_client.apply import Timelines, apply_event
from realtime_dispatch_client.connection import ConnectionOptions, HubClientConnection
from realtime_dispatch_client.events import (
    EVENT_NAME,
    AppEvent,
    app_event,
    is_known,
    parse_event,
)
from realtime_dispatch_client.exceptions import (
    HubMethodError,
    HubProtocolError,
    HubUnavailable,
    RestError,
)
from realtime_dispatch_client.protocol import EventRecord, reconnect_delay
from realtime_dispatch_client.rest import SYNC_LIMIT, MessengerRest
from realtime_dispatch_client.seen import SeenEvents
from realtime_dispatch_client.timeline import Timeline, TimelineMessage

log = structlog.get_logger(__name__)

E = TypeVar("E", bound=Contract)
Callback = Callable[..., Awaitable[None] | None]
ResyncReason = Literal["start", "limited", "sync_off", "new_chat"]
KeyType = Literal["uuid", "bigint", "text"]
ResyncHook = Callable[..., Awaitable[None] | None]
"""``resync(reason)``, or ``resync(reason, chat_id)`` to be asked about chats first seen live
(``reason`` ``"new_chat"``, ``chat_id`` that chat's key)."""


@dataclass(frozen=True, slots=True)
class ClientOptions:
    connection: ConnectionOptions = field(default_factory=ConnectionOptions)
    # On (re)connect, refetch from this many seqs before the last contiguous one, so that edits
    # and deletions of recent messages made while away are picked up too.
    resync_overlap: int = 20
    request_timeout: float = 10.0
    resync_retry_cap: float = 5.0
    sync_page: int = SYNC_LIMIT  # events per GET /api/sync page
    seen_capacity: int = 20_000  # eventIds remembered for the dedupe
    # The deployment's REALTIME_KEY_TYPE: the typed events' ids are UUIDs ("uuid"), ints
    # ("bigint") or strings ("text"), as the server's payloads carry them.
    key_type: KeyType = "uuid"
    # Keep-up reads of GET /api/sync during a session, so that a reconnect reads what it missed
    # plus at most what came since the last one: after this many live events (with an eventId)
    # ...
    cursor_every: int = 1000
    # ... or once the stream has been quiet this many seconds after some (None: only by count).
    cursor_idle: float | None = 5.0

    def __post_init__(self) -> None:
        if self.cursor_every < 1:
            raise ValueError("cursor_every: at least 1")
        if self.cursor_idle is not None and not self.cursor_idle > 0:
            raise ValueError("cursor_idle: positive, or None")


@dataclass
class ClientStats:
    duplicates_dropped: int = 0
    refetches: int = 0  # REST resyncs that completed
    recovered: int = 0  # messages that came from REST, not from the hub
    connects: int = 0
    resumes: int = 0  # reconnects resumed from the sync cursor
    missed: int = 0  # events a resume brought that had not come live
    full_resyncs: int = 0  # first connects, resumes answered `limited`, connects without sync
    sync_pages: int = 0  # GET /api/sync pages read (resumes, keep-up reads, gaps, the start)
    sync_events: int = 0  # events those pages held (new or not)
    cursor_reads: int = 0  # keep-up reads that completed
    last_resume_read: int = 0  # events the last resume's pages held (new or not)
    seeded: int = 0  # chats first seen live that the resync hook was asked to seed


async def _call(callback: Callback, *args: Any) -> None:
    result = callback(*args)
    if inspect.isawaitable(result):
        await result


class MessengerClient:
    """One user's realtime view of the messenger::

    async with MessengerClient("http://127.0.0.1:8000", token) as client:
        client.on(MessageReceived, show)
        timeline = await client.track(chat_id)
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        options: ClientOptions | None = None,
        resync: ResyncHook | None = None,
    ) -> None:
        """``resync``: the application's own full resync, for a server without the reference
        messenger's REST API (see the module's docstring); without it, the client resyncs over
        that API."""
        self.options = options or ClientOptions()
        self._keys = key_codec(self.options.key_type)
        if self._keys is not UUID_KEYS and resync is None:
            raise ValueError(
                f"key_type {self._keys.name}: give the resync hook (the reference messenger's"
                " REST API, the resync without it, has uuid keys)"
            )
        self._own_resync = resync
        self._hook_takes_chat = resync is not None and _takes_two(resync)
        self._sync_off = False  # the server answered that it has no GET /api/sync
        self._key_type_told = False  # client_key_type_mismatch said once
        self.stats = ClientStats()
        self.timelines = Timelines()
        self._base_url = base_url
        self._token = token
        self._callbacks: dict[type[Contract] | str, list[Callback]] = {}
        self._on_duplicate: list[Callback] = []
        self._on_resync: list[Callback] = []
        self._on_resumed: list[Callback] = []
        self.cursor: str | None = None
        """The sync cursor: ``nextCursor`` of the last sync page (``None`` before the first
        connect, or after the server refused it)."""
        self._seen = SeenEvents(self.options.seen_capacity)
        self._resumer: asyncio.Task[None] | None = None
        self._resume_again = False
        self._report = False  # the read asked for is a resume (counted, on_resumed told)
        self._unread = 0  # live events with an eventId since the last read began
        self._last_live = 0.0  # when the last of them came (the loop's clock)
        self._keeper: asyncio.Task[None] | None = None
        self._seeders: set[asyncio.Task[None]] = set()
        self._connected = asyncio.Event()
        self._wanted: dict[UUID, int] = {}  # chat → overlap of the resync asked for
        self._syncers: dict[UUID, asyncio.Task[None]] = {}
        self._chat_lister: asyncio.Task[None] | None = None
        self.chats: dict[UUID, ChatSummaryOut] = {}
        """The user's active chats as of the last (re)connect (``GET /api/chats``)."""
        self._http: httpx.AsyncClient | None = None
        self._group: asyncio.TaskGroup | None = None
        self._rest: MessengerRest | None = None
        self._hub: HubClientConnection | None = None
        self._watched: dict[str, None] = {}
        """The ids the application watches (``watch_presence`` less ``unwatch_presence``), in
        order: watched again after every reconnect."""
        self._rewatcher: asyncio.Task[None] | None = None
        self._rewatch_again = False

    # --- lifecycle ----------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        self._http = httpx.AsyncClient(
            base_url=self._base_url, timeout=self.options.request_timeout
        )
        self._rest = MessengerRest(self._http, self._token)
        self._group = asyncio.TaskGroup()
        await self._group.__aenter__()
        connection = HubClientConnection(self._base_url, self._token, self, self.options.connection)
        self._hub = connection
        self._runner = self._group.create_task(connection.run(), name="messenger-client-hub")
        if self.options.cursor_idle is not None:
            self._keeper = self._group.create_task(
                self._keep_up(self.options.cursor_idle), name="messenger-client-cursor"
            )
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        """Ends the hub connection and the client's tasks; ``exc_info`` (the block's exception,
        if any) goes on to their task group as is."""
        assert self._group is not None
        assert self._http is not None
        try:
            self._runner.cancel()
            pending = [
                *self._syncers.values(),
                *self._seeders,
                *filter(None, [self._chat_lister, self._resumer, self._keeper]),
            ]
            for task in pending:
                task.cancel()
            await self._group.__aexit__(*exc_info)
        except BaseExceptionGroup as failed:
            if len(failed.exceptions) == 1:  # one failure (e.g. HubRefused): raise it as is
                raise failed.exceptions[0] from None
            raise
        finally:
            await self._http.aclose()

    # --- public API ---------------------------------------------------------------------------

    @property
    def rest(self) -> MessengerRest:
        """REST calls as this user (inside the ``async with`` block)."""
        assert self._rest is not None, "use the client inside `async with`"
        return self._rest

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    async def wait_connected(self) -> None:
        await self._connected.wait()

    @overload
    def on(self, event: type[E], callback: Callable[[E], Awaitable[None] | None]) -> None: ...

    @overload
    def on(self, event: str, callback: Callable[[Any], Awaitable[None] | None]) -> None: ...

    def on(self, event: type[E] | str, callback: Callable[[Any], Awaitable[None] | None]) -> None:
        """Call ``callback`` with every new event of ``event`` (duplicates never reach it): a
        model (``MessageReceived``), or an event name. A name of the 26 or of a live signal
        (``"message_received"``) is its model, typed as before; any other name
        (``"reaction_added"``, an application's declared kind) gives
        :class:`~realtime_dispatch_client.events.AppEvent` values, deduplicated by ``eventId``,
        resumed through sync and ordered as the built-in events are."""
        if not isinstance(event, str):
            self._callbacks.setdefault(event, []).append(callback)
            return
        if not event:
            raise ValueError("on: an event name")
        keys = _MODELS_BY_NAME.get(event, (event,))  # call_invited: its 1:1 and group shapes
        for key in keys:
            self._callbacks.setdefault(key, []).append(callback)

    # --- live signals (never persisted: nothing to resync) ----------------------------------

    async def typing(self, chat_id: UUID | int | str) -> None:
        """Tell the chat's other members this user is typing (``user_typing``); repeats inside
        the hub's typing interval are accepted and dropped. Raises :class:`HubMethodError` for
        a chat this user is not a member of, :class:`HubUnavailable` while not connected."""
        await self._require_hub().invoke("Typing", str(chat_id))

    async def watch_presence(self, user_ids: Iterable[UUID]) -> list[PresenceChanged]:
        """Follow these users' presence (``presence_changed`` events, ``on(PresenceChanged,
        …)``); the answer is the current state of those who share a chat with this user (the
        others are left out). At most the hub's watch limit per connection: past it,
        :class:`HubMethodError`. Watches belong to a connection: the client remembers these
        ids and watches them again after every reconnect, their states then delivered as
        ``PresenceChanged`` events."""
        ids = [str(u) for u in user_ids]
        answer = await self._watch(ids)
        self._watched.update(dict.fromkeys(ids))
        return answer

    async def unwatch_presence(self, user_ids: Iterable[UUID]) -> None:
        ids = [str(u) for u in user_ids]
        for user_id in ids:
            self._watched.pop(user_id, None)
        await self._require_hub().invoke("UnwatchPresence", ids)

    async def _watch(self, ids: list[str]) -> list[PresenceChanged]:
        answer = await self._require_hub().invoke("WatchPresence", ids)
        if not isinstance(answer, list):
            raise HubProtocolError("WatchPresence: expected a list")
        context = key_context(self._keys)
        return [PresenceChanged.model_validate(entry, context=context) for entry in answer]

    async def _rewatch(self) -> None:
        """After a reconnect: watch the remembered ids again on the new connection, and
        deliver their states as ``PresenceChanged`` events (what changed while away)."""
        try:
            while True:
                self._rewatch_again = False
                ids = list(self._watched)
                try:
                    states = await self._watch(ids) if ids else []
                except (HubMethodError, HubProtocolError, HubUnavailable) as exc:
                    log.warning("client_rewatch_failed", users=len(ids), error=str(exc))
                    states = []
                if ids != list(self._watched):  # watched or unwatched meanwhile
                    self._rewatch_again = True
                for state in states:
                    if str(state.user_id) in self._watched:
                        for callback in self._callbacks.get(PresenceChanged, ()):
                            await _call(callback, state)
                if not self._rewatch_again:
                    return
        finally:
            self._rewatcher = None

    def _require_hub(self) -> HubClientConnection:
        assert self._hub is not None, "use the client inside `async with`"
        return self._hub

    def on_duplicate(self, callback: Callable[[UUID, int], Awaitable[None] | None]) -> None:
        """``callback(chat_id, seq)`` when a push was dropped as a duplicate."""
        self._on_duplicate.append(callback)

    def on_resync(
        self, callback: Callable[[UUID, list[TimelineMessage]], Awaitable[None] | None]
    ) -> None:
        """``callback(chat_id, recovered)`` after a REST resync (``recovered``: the messages
        the hub had not delivered)."""
        self._on_resync.append(callback)

    def on_resumed(self, callback: Callable[[int], Awaitable[None] | None]) -> None:
        """``callback(missed)`` after a reconnect resumed from the cursor: ``missed`` events
        came from ``GET /api/sync`` that the hub had not delivered."""
        self._on_resumed.append(callback)

    def timeline(self, chat_id: UUID) -> Timeline:
        """The chat's timeline as it is now (empty for a chat not seen yet)."""
        return self.timelines.get(chat_id)

    def seed(self, chat_id: Key, messages: Iterable[TimelineMessage]) -> list[TimelineMessage]:
        """Seed a chat's timeline from the application's own history (its latest page, or all
        of it), typically in the resync hook (``"start"``, ``"limited"``, ``"new_chat"``): the
        messages are merged (duplicates of pushes dropped) and what is older than the oldest
        of them is not a gap to repair. Returns the messages that were new here."""
        return self.timelines.get(chat_id).seed(messages)

    async def track(self, chat_id: UUID) -> Timeline:
        """Follow a chat: fetch its history now; it is resynced on every reconnect. With the
        application's own ``resync``, its history is the application's to load."""
        await self.resync(chat_id)
        return self.timelines.get(chat_id)

    async def resync(self, chat_id: UUID) -> None:
        """Fetch what the chat's timeline misses, and wait for it (with the application's
        own ``resync``: read on from the sync cursor)."""
        self.timelines.get(chat_id)
        if self._own_resync is not None:
            self._request_resume()
            await self.settled()
            return
        self._request_sync(chat_id, 0)
        while (task := self._syncers.get(chat_id)) is not None:
            await asyncio.wait([task])

    async def settled(self) -> None:
        """Wait until no resume, keep-up read, resync, seeding or listing of chats is running."""
        while (
            self._syncers
            or self._seeders
            or self._chat_lister is not None
            or self._resumer is not None
        ):
            await asyncio.wait(
                [
                    *self._syncers.values(),
                    *self._seeders,
                    *filter(None, [self._chat_lister, self._resumer]),
                ]
            )

    # --- HubListener --------------------------------------------------------------------------

    async def hub_connected(self, reconnect: bool) -> None:
        self.stats.connects += 1
        self._connected.set()
        log.info("client_connected", reconnect=reconnect)
        self._sync_off = False  # ask again: the server may have been upgraded meanwhile
        self._request_resume()
        if self._rewatcher is not None:
            self._rewatch_again = True  # reconnected again while watching again
        elif self._watched and self._group is not None:
            self._rewatcher = self._group.create_task(
                self._rewatch(), name="messenger-client-rewatch"
            )

    def _request_resume(self, *, report: bool = True) -> None:
        """A read on from the cursor: a resume (``report``: counted, ``on_resumed`` told) or
        a keep-up read. One at a time: asked again meanwhile, it reads on once more."""
        self._report |= report
        if self._resumer is not None:
            self._resume_again = True  # asked again while resuming: read on once more
        elif self._group is not None:
            self._resumer = self._group.create_task(self._resume(), name="messenger-client-resume")

    async def hub_disconnected(self) -> None:
        self._connected.clear()

    async def hub_event(self, record: EventRecord) -> None:
        await self._deliver(record.target, record.arguments, live=True)

    def _count_live(self) -> None:
        """A live event with an ``eventId``: past ``cursor_every`` since the last read, the
        cursor keeps up."""
        self._unread += 1
        self._last_live = asyncio.get_running_loop().time()
        if self._unread >= self.options.cursor_every:
            self._request_keep_up()

    def _request_keep_up(self) -> None:
        if self.cursor is None or not self.connected or self._sync_off:
            return  # the first connect's read, or the next reconnect's, comes anyway
        self._unread = 0
        self._request_resume(report=False)

    async def _keep_up(self, idle: float) -> None:
        """Once the stream has been quiet ``idle`` seconds after some live events, read on."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(idle)
            if self._unread and loop.time() - self._last_live >= idle:
                self._request_keep_up()

    def _tell_key_type(self, target: str, arguments: tuple[Any, ...]) -> None:
        """An event refused because its ids are keys of another type than ``key_type`` (a
        bigint deployment and the default options: every event would be skipped) is said
        once, as an error naming the option to set."""
        if self._key_type_told:
            return
        for codec in KEY_TYPES.values():
            if codec is self._keys:
                continue
            try:
                parse_event(target, arguments, keys=codec)
            except HubProtocolError:
                continue
            self._key_type_told = True
            log.error(
                "client_key_type_mismatch",
                target=target,
                key_type=self._keys.name,
                payload_key_type=codec.name,
                fix=f'ClientOptions(key_type="{codec.name}"), the server\'s REALTIME_KEY_TYPE',
            )
            return

    async def _deliver(
        self, target: str, arguments: tuple[Any, ...], *, live: bool = False
    ) -> bool:
        """Parse, dedupe (``eventId``, then ``(chatId, seq)``), apply, call back; ``True`` when
        the event was new. ``live``: it came from the hub (not from a sync page)."""
        if not is_known(target):
            return await self._deliver_app_event(target, arguments, live=live)
        try:
            event = parse_event(target, arguments, keys=self._keys)
        except HubProtocolError as exc:
            # A malformed payload is skipped; a missed message shows up as a gap later.
            log.warning("client_event_invalid", target=target, error=str(exc))
            self._tell_key_type(target, arguments)
            return False
        if event is None:
            return False
        event_id = getattr(event, "event_id", None)
        if live and event_id is not None:
            self._count_live()
        if event_id is not None and not self._seen.first_time(event_id):
            await self._duplicate(event, getattr(event, "chat_id", None))
            return False
        chat_id = getattr(event, "chat_id", None)
        if chat_id is not None and self._unheard(chat_id):
            self._first_seen(chat_id, event)
        applied = apply_event(self.timelines, event)
        if applied.duplicate:
            await self._duplicate(event, applied.chat_id)
        else:
            for callback in self._callbacks.get(type(event), ()):
                await _call(callback, event)
        if applied.needs_sync and applied.chat_id is not None:
            if self._own_resync is None:
                if isinstance(applied.chat_id, UUID):  # the reference REST API: uuid keys
                    self._request_sync(applied.chat_id, 0)
            elif not self._sync_off:
                self._request_resume()  # what is missing comes from the cursor on
        return not applied.duplicate

    async def _deliver_app_event(
        self, target: str, arguments: tuple[Any, ...], *, live: bool
    ) -> bool:
        """An event of a name without a model (an application's declared kind): the same
        dedupe by ``eventId``, then its callbacks by name, in arrival order."""
        try:
            event = app_event(target, arguments)
        except HubProtocolError as exc:
            log.warning("client_event_invalid", target=target, error=str(exc))
            return False
        if event.event_id is not None:
            if live:
                self._count_live()
            if not self._seen.first_time(event.event_id):
                await self._duplicate(event, event.chat_id)
                return False
        for callback in self._callbacks.get(target, ()):
            await _call(callback, event)
        return True

    def _unheard(self, chat_id: Key) -> bool:
        """No message of the chat heard of yet (a read receipt or a ``chat_updated`` may have
        come: they tell no seq to start from)."""
        return chat_id not in self.timelines or self.timelines.get(chat_id).highest_seq == 0

    def _first_seen(self, chat_id: Key, event: Contract) -> None:
        """A chat whose first event came (live, or in a resume's page), on an adopter's schema
        (the application's own ``resync``): what came before is the application's history,
        not a gap to read over sync. Its timeline starts at this event, and a hook that takes
        the chat is asked to seed it."""
        if self._own_resync is None:
            return  # the reference REST API fetches a chat's history itself
        seq = getattr(event, "seq", None)
        if not isinstance(seq, int):
            return  # a read receipt, a chat_updated: nothing to start from yet
        timeline = self.timelines.get(chat_id)
        timeline.start_after(seq - 1 if isinstance(event, MessageReceived) else seq)
        if self._hook_takes_chat and self._group is not None:
            self.stats.seeded += 1
            task = self._group.create_task(
                self._seed(chat_id), name=f"messenger-client-seed-{chat_id}"
            )
            self._seeders.add(task)
            task.add_done_callback(self._seeders.discard)

    async def _seed(self, chat_id: Key) -> None:
        assert self._own_resync is not None
        log.info("client_resync_hook", reason="new_chat")
        await _call(self._own_resync, "new_chat", chat_id)

    async def _duplicate(self, event: Contract | AppEvent, chat_id: Key | None) -> None:
        self.stats.duplicates_dropped += 1
        seq = getattr(event, "seq", getattr(event, "last_read_seq", 0))
        for callback in self._on_duplicate:
            await _call(callback, chat_id, seq)

    # --- resume -------------------------------------------------------------------------------

    async def _resume(self) -> None:
        try:
            while True:
                self._resume_again = False
                report, self._report = self._report, False
                try:
                    if self.cursor is None:
                        self.cursor = (await self._sync_page(None)).next_cursor
                        await self._full_resync("start")
                    else:
                        await self._read_on(report=report)
                except RestError as exc:  # a server without /api/sync: resync as before
                    self.cursor = None
                    if self._own_resync is None:
                        log.warning("client_sync_unavailable", status=exc.status, code=exc.code)
                    else:
                        log.info("client_sync_off", status=exc.status, code=exc.code)
                        self._sync_off = exc.status in {404, 405}  # not a refused token
                    await self._full_resync("sync_off")
                if not self._resume_again:
                    return
        finally:
            self._resumer = None

    async def _read_on(self, *, report: bool = True) -> None:
        """Sync pages from the cursor until the last for now (short, without ``more``);
        ``limited`` → the full resync. ``report``: a resume (counted, ``on_resumed`` told);
        otherwise a keep-up read (what it brings that had not come live is delivered all the
        same: a row retried after its neighbours were pushed)."""
        missed = 0
        held = 0
        read = 0
        memberships = False  # a chat event came: the chat list may have changed
        while True:
            page = await self._sync_page(self.cursor)
            if page.limited:
                log.info("client_resume_limited")
                self.cursor = page.next_cursor
                await self._full_resync("limited")
                return
            read += len(page.events)
            for item in page.events:
                if await self._deliver(item.target, (item.payload,)):
                    missed += 1
                    memberships |= item.target == "chat_updated"
            self.cursor = page.next_cursor
            if page.held_back:  # a transaction still open holds newer events: ask again
                held += 1
                await asyncio.sleep(reconnect_delay(held, base=0.1, cap=2.0, jitter=0.0))
            elif not page.more and len(page.events) < self.options.sync_page:
                # The end for now. A page that stopped at the server's scan bound says `more`,
                # however few events it holds (none, even); a full one from a server before
                # `more` existed is followed as before.
                break
        own = self._own_resync is not None  # no chat list to refresh: the application's
        if memberships and not own and self._group is not None and self._chat_lister is None:
            self._chat_lister = self._group.create_task(
                self._sync_chat_list(), name="messenger-client-chat-list"
            )
        if not report:
            self.stats.cursor_reads += 1
            log.debug("client_cursor_kept_up", read=read, missed=missed)
            return
        self.stats.last_resume_read = read
        self.stats.resumes += 1
        self.stats.missed += missed
        log.info("client_resumed", missed=missed)
        for callback in self._on_resumed:
            await _call(callback, missed)

    async def _sync_page(self, since: str | None) -> SyncPageOut:
        """One sync page, retried with full-jitter backoff (or the server's ``Retry-After``)
        on transport errors and 5xx/429; a refused cursor (4xx) is dropped for a fresh one."""
        failures = 0
        while True:
            try:
                page = await self.rest.sync(since, limit=self.options.sync_page)
                self.stats.sync_pages += 1
                self.stats.sync_events += len(page.events)
                return page
            except (httpx.TransportError, RestError) as exc:
                retriable = not isinstance(exc, RestError) or exc.status >= 500 or exc.status == 429
                if not retriable:
                    if since is None:
                        raise
                    # A cursor this server does not take (another server, a bad copy): start
                    # again from a fresh one, after the full resync, as for `limited`.
                    log.warning("client_cursor_refused", error=type(exc).__name__)
                    fresh = await self._sync_page(None)
                    return fresh.model_copy(update={"limited": True})
                failures += 1
                delay = reconnect_delay(
                    failures, base=0.25, cap=self.options.resync_retry_cap, jitter=random.random()
                )
                wait = exc.retry_after if isinstance(exc, RestError) else None
                if wait is not None:
                    delay = max(delay, wait * (1.0 + random.random()))
                log.info("client_sync_failed", error=type(exc).__name__)
                await asyncio.sleep(delay)

    async def _full_resync(self, reason: ResyncReason) -> None:
        """The application's own resync when it gave one; otherwise over the reference REST
        API: every tracked chat's history, and the chat list (each chat in it)."""
        self.stats.full_resyncs += 1
        if self._own_resync is not None:
            log.info("client_resync_hook", reason=reason)
            await _call(self._own_resync, reason)
            return
        for timeline in self.timelines:
            if isinstance(timeline.chat_id, UUID):  # the reference REST API: uuid keys
                self._request_sync(timeline.chat_id, self.options.resync_overlap)
        if self._group is not None and self._chat_lister is None:
            self._chat_lister = self._group.create_task(
                self._sync_chat_list(), name="messenger-client-chat-list"
            )

    # --- resync -------------------------------------------------------------------------------

    def _request_sync(self, chat_id: UUID, overlap: int) -> None:
        self._wanted[chat_id] = max(self._wanted.get(chat_id, 0), overlap)
        if chat_id not in self._syncers and self._group is not None:
            self._syncers[chat_id] = self._group.create_task(
                self._sync_loop(chat_id), name=f"messenger-client-resync-{chat_id}"
            )

    async def _sync_loop(self, chat_id: UUID) -> None:
        delay = 0.25
        try:
            while chat_id in self._wanted:
                overlap = self._wanted.pop(chat_id)
                try:
                    await self._sync_once(chat_id, overlap)
                    delay = 0.25
                except (httpx.TransportError, RestError) as exc:
                    if isinstance(exc, RestError) and exc.status < 500:
                        log.warning("client_resync_refused", status=exc.status, code=exc.code)
                        return
                    log.info("client_resync_failed", error=type(exc).__name__)
                    self._wanted[chat_id] = max(self._wanted.get(chat_id, 0), overlap)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, self.options.resync_retry_cap)
        finally:
            del self._syncers[chat_id]

    async def _sync_chat_list(self) -> None:
        """Refresh :attr:`chats` and resync every chat in it (new ones are tracked from now)."""
        try:
            listed = await self.rest.list_chats()
        except (httpx.TransportError, RestError) as exc:
            # The next reconnect lists again; tracked chats are resynced on their own.
            log.info("client_chat_list_failed", error=type(exc).__name__)
            return
        finally:
            self._chat_lister = None
        self.chats = {chat.chat_id: chat for chat in listed}
        for chat in listed:
            known = self.timelines.get(chat.chat_id).contiguous_seq
            if chat.last_seq > known:
                self._request_sync(chat.chat_id, self.options.resync_overlap)

    async def _sync_once(self, chat_id: UUID, overlap: int) -> None:
        timeline = self.timelines.get(chat_id)
        after = max(0, timeline.contiguous_seq - overlap)
        history = await self.rest.history_after(chat_id, after)
        recovered = timeline.add_history(history)
        self.stats.refetches += 1
        self.stats.recovered += len(recovered)
        log.debug("client_resynced", after_seq=after, fetched=len(history), new=len(recovered))
        for callback in self._on_resync:
            await _call(callback, chat_id, recovered)


_MODELS_BY_NAME: dict[str, tuple[type[Contract], ...]] = {}
for _model, _name in EVENT_NAME.items():
    _MODELS_BY_NAME[_name] = (*_MODELS_BY_NAME.get(_name, ()), _model)
"""Every model of an event name the SDK knows (the 26, their group shapes, the signals)."""


def _takes_two(hook: ResyncHook) -> bool:
    """Whether the resync hook takes a second positional argument (the chat of
    ``"new_chat"``): hooks written before it take the reason alone and are not asked."""
    try:
        parameters = inspect.signature(hook).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: the reason alone
        return False
    positional = 0
    for parameter in parameters:
        if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            return True
        if parameter.kind in {
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
        }:
            positional += 1
    return positional >= 2
