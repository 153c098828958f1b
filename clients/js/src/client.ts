// MessengerClient: the official SignalR client (HubConnectionBuilder, withAutomaticReconnect,
// accessTokenFactory), the REST API and one Timeline per chat, with the Python SDK's guarantees:
// duplicates dropped (by eventId, then by (chatId, seq)), a seq gap refetched over REST
// (afterSeq), one resync per chat at a time (requests meanwhile folded into one more round).
// Resume: the first connect takes a sync cursor and then resyncs every chat over REST; every
// reconnect after that reads GET /api/sync from the cursor through the same dedupe, and falls
// back to the full resync only when the server answers `limited`. Reconnects wait with full
// jitter, so the clients of a restarted replica do not come back in lock-step.
// On a deployment without the reference REST API (`hub` on your own schema), pass `resync`, your
// application's own full resync: the SDK then never calls /api/chats…, resumes through
// GET /api/sync alone (a seq gap reads on from the cursor) and calls `resync(reason)` where the
// cursor cannot carry it: "start" (the first cursor was just taken: load what came before it),
// "limited" (the server no longer holds what came after the cursor), "sync_off" (the server has
// no GET /api/sync: on every connect). A chat first seen live (its first event a push, or in a
// resume's page) is not a gap: its timeline starts at that event, and a hook declared with a second parameter,
// `(reason, chatId) => …`, is asked `resync("new_chat", chatId)` (never sync) to seed it from
// your own history with `client.seed(chatId, messages)`.
// The cursor keeps up during a session: after `cursorEvery` live events, or once the stream has
// been quiet `cursorIdleMs` after some, the client reads on from its cursor in the background
// (a keep-up read: what it brings came live already and is dropped), so a reconnect reads what
// it missed plus at most what came since, never the whole session. The position comes from the
// sync read, not from the pushes: only a sync page knows the commit-safe horizon, so a cursor
// that moves only by reading never skips a row still pending.
// Any event name works with `on`: the 26 and the live signals typed, any other (your own
// declared kinds, `reaction_added`) with its payload as it came, through the same dedupe by
// eventId, the same resume and in the same order.

import {
  HubConnection,
  HubConnectionBuilder,
  HubConnectionState,
  HttpTransportType,
  LogLevel,
} from "@microsoft/signalr";
import {
  EVENT_NAMES,
  type HubEvents, type HubSignals, type Key, type MessageReceived, type PresenceChanged,
  type SyncPageOut,
} from "./contracts.js";
import { type ChatSummary, MessengerRest, RestError, SYNC_LIMIT, type SendOptions } from "./rest.js";
import { type Change, Timeline, type TimelineMessage } from "./timeline.js";

export const HUB_PATH = "/hubs/messenger";
export type EventName = keyof HubEvents;
// The built-in events, generated from the kinds' catalogue (scripts/gen_js_types.py).
export { EVENT_NAMES };

/** Why the SDK asks the application for its own full resync (ClientOptions.resync);
 *  "new_chat": seed the chat of the second argument (only a hook declared with two
 *  parameters is asked). */
export type ResyncReason = "start" | "limited" | "sync_off" | "new_chat";

/** The payload of an event of your own (a declared kind): its fields as the server built them. */
export interface AppEventPayload {
  eventId?: string;
  chatId?: Key;
  [field: string]: unknown;
}

const MESSAGE_EVENTS: ReadonlySet<string> = new Set(["message_received", "message_edited", "message_deleted"]);

/** A hub transport by the name the official client gives it. */
export type TransportName = "WebSockets" | "ServerSentEvents" | "LongPolling";

/** The hub's live signals: never persisted, no eventId, not deduplicated nor resynced. */
export type SignalName = keyof HubSignals;
export const SIGNAL_NAMES: readonly SignalName[] = ["user_typing", "presence_changed"];
/** Every name `on` takes, and its payload. */
export type HubMessages = HubEvents & HubSignals;

export interface ClientOptions {
  /** Returns the current JWT; called for every connect and REST call. */
  token: () => string | Promise<string>;
  /** Called when the server refused the token (401): return a fresh one. */
  refreshToken?: () => string | Promise<string>;
  /** Refetch this many seqs before the last contiguous one on reconnect (edits made meanwhile). */
  resyncOverlap?: number;
  /** Upper bounds (ms) of the automatic reconnect's delays; the last one repeats for ever. Each
   *  wait is drawn uniformly below its bound (full jitter). */
  reconnectDelays?: number[];
  /** Events per GET /api/sync page. */
  syncPage?: number;
  /** eventIds remembered for the dedupe. */
  seenCapacity?: number;
  /** Seen before any processing: return false to drop a push (for tests and demos). */
  inspect?: (event: EventName | SignalName, payload: unknown) => boolean;
  logLevel?: LogLevel;
  fetch?: typeof fetch;
  /** A WebSocket constructor for the hub connection (the SignalR client's own option). */
  webSocket?: unknown;
  /** The hub transport(s): HttpTransportType flags (or-ed: the client falls back in its own
   *  order) or one name, as the official client names them. Default: WebSockets. */
  transport?: HttpTransportType | TransportName;
  /** Your application's own full resync, for a server without the reference REST API: with it
   *  the SDK never calls /api/chats… (see the top of this file for the reasons). */
  resync?: (reason: ResyncReason, chatId?: Key) => void | Promise<void>;
  /** Keep-up reads of GET /api/sync during a session: after this many live events (default
   *  1000) ... */
  cursorEvery?: number;
  /** ... or once the stream has been quiet this long (ms, default 5000; null: by count only). */
  cursorIdleMs?: number | null;
}

function transportOf(option: ClientOptions["transport"]): HttpTransportType {
  if (option === undefined) return HttpTransportType.WebSockets;
  return typeof option === "string" ? HttpTransportType[option] : option;
}

export interface ClientStats {
  duplicatesDropped: number;
  refetches: number;
  recovered: number;
  connects: number;
  tokenRefreshes: number;
  /** Reconnects resumed from the sync cursor. */
  resumes: number;
  /** Events a resume brought that had not come live. */
  missed: number;
  /** First connects, resumes the server answered `limited`, and connects without sync. */
  fullResyncs: number;
  /** GET /api/sync pages read (resumes, keep-up reads, gaps, the start) and their events. */
  syncPages: number;
  syncEvents: number;
  /** Keep-up reads that completed. */
  cursorReads: number;
  /** Events the last resume's pages held (new or not). */
  lastResumeRead: number;
  /** Chats first seen live that the resync hook was asked to seed. */
  seeded: number;
}

type Handler<K extends EventName | SignalName> = (payload: HubMessages[K]) => void;

export class MessengerClient {
  readonly stats: ClientStats = {
    duplicatesDropped: 0, refetches: 0, recovered: 0, connects: 0, tokenRefreshes: 0,
    resumes: 0, missed: 0, fullResyncs: 0, syncPages: 0, syncEvents: 0, cursorReads: 0,
    lastResumeRead: 0, seeded: 0,
  };
  /** The sync cursor: nextCursor of the last sync page (null before the first connect). */
  cursor: string | null = null;
  readonly rest: MessengerRest;
  readonly hub: HubConnection;
  private readonly timelines = new Map<Key, Timeline>();
  private readonly handlers = new Map<string, Array<(payload: never) => void>>();
  private readonly duplicateHandlers: Array<(chatId: Key, seq: number) => void> = [];
  private readonly resyncHandlers: Array<(chatId: string, recovered: TimelineMessage[]) => void> = [];
  private readonly connectionHandlers: Array<(up: boolean, reconnect: boolean) => void> = [];
  private readonly resumedHandlers: Array<(missed: number) => void> = [];
  private readonly seen = new Set<string>();
  /** The ids the application watches (watchPresence less unwatchPresence), in order: watched
   *  again after every reconnect. */
  private readonly watched = new Set<string>();
  private rewatching: Promise<void> | null = null;
  private rewatchAgain = false;
  private resuming: Promise<void> | null = null;
  private resumeAgain = false;
  /** The read asked for is a resume (counted, onResumed told), not a keep-up read. */
  private report = false;
  /** Live events with an eventId since the last read was asked for. */
  private unread = 0;
  private idleTimer: ReturnType<typeof setTimeout> | null = null;
  private readonly seeding = new Set<Promise<void>>();
  /** Event names registered with the official client (`hub.on`). */
  private readonly listened = new Set<string>();
  private readonly wanted = new Map<string, number>();
  private readonly syncing = new Map<string, Promise<void>>();
  private readonly overlap: number;
  private token: string | null = null;
  private stopped = false;
  /** The server answered that it has no GET /api/sync (asked again on every connect). */
  private syncOff = false;

  constructor(
    private readonly baseUrl: string,
    private readonly options: ClientOptions,
  ) {
    this.overlap = options.resyncOverlap ?? 20;
    this.rest = new MessengerRest(baseUrl.replace(/\/$/, ""), () => this.currentToken(), options.fetch);
    const delays = options.reconnectDelays ?? [0, 250, 1000, 2000, 5000];
    this.hub = new HubConnectionBuilder()
      .withUrl(this.baseUrl.replace(/\/$/, "") + HUB_PATH, {
        accessTokenFactory: () => this.currentToken(),
        transport: transportOf(options.transport),
        ...(options.webSocket === undefined ? {} : { WebSocket: options.webSocket }),
      })
      .withAutomaticReconnect({
        nextRetryDelayInMilliseconds: (ctx) =>
          Math.random() * delays[Math.min(ctx.previousRetryCount, delays.length - 1)],
      })
      .configureLogging(options.logLevel ?? LogLevel.Error)
      .build();
    for (const name of EVENT_NAMES) this.listen(name);
    for (const name of SIGNAL_NAMES) this.hub.on(name, (payload: unknown) => this.signal(name, payload));
    this.hub.onreconnecting(() => this.emitConnection(false, true));
    this.hub.onreconnected(() => this.connected(true));
    this.hub.onclose(() => {
      this.emitConnection(false, false);
      if (!this.stopped) void this.restart(); // reconnect attempts ran out: keep trying
    });
  }

  // --- lifecycle --------------------------------------------------------------------------

  /** Connect (refreshing the token once if the hub refuses it) and resync what is tracked. */
  async start(): Promise<void> {
    this.stopped = false;
    await this.connect();
    await this.connected(false);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.clearIdle();
    await this.hub.stop();
    await this.settled();
  }

  get isConnected(): boolean {
    return this.hub.state === HubConnectionState.Connected;
  }

  // --- public API -------------------------------------------------------------------------

  /** A typed handler for one of the 26 events (duplicates never reach it) or of the live
   *  signals (`user_typing`, `presence_changed`); or, for any other name (your own declared
   *  kinds, `on("reaction_added", …)`), a handler of its payload as it came, deduplicated by
   *  eventId, resumed through sync and ordered as the built-in events are. */
  on<K extends EventName | SignalName>(event: K, handler: Handler<K>): void;
  on(event: string, handler: (payload: AppEventPayload) => void): void;
  on(event: string, handler: (payload: never) => void): void {
    if (event === "") throw new Error("on: an event name");
    const list = this.handlers.get(event) ?? [];
    list.push(handler);
    this.handlers.set(event, list);
    if (!(SIGNAL_NAMES as readonly string[]).includes(event)) this.listen(event);
  }

  /** Seed a chat's timeline from your own history (its latest page, or all of it), typically in
   *  the resync hook ("start", "limited", "new_chat"): merged (duplicates of pushes dropped),
   *  and what is older than its oldest message is not a gap. Returns the messages new here. */
  seed(chatId: Key, messages: TimelineMessage[]): TimelineMessage[] {
    return this.timeline(chatId).seed(messages);
  }

  /** Tell the chat's other members this user is typing (`user_typing`, shown until its
   *  `expiresAt`). Repeats inside the hub's typing interval are accepted and dropped; a chat
   *  the user is not a member of rejects. */
  async typing(chatId: string | number): Promise<void> {
    await this.hub.invoke("Typing", chatId);
  }

  /** Follow these users' presence (`presence_changed`); resolves to the current state of those
   *  who share a chat with this user (others are left out). Past the hub's watch limit per
   *  connection it rejects. Watches belong to a connection: the client remembers these ids and
   *  watches them again after every reconnect, their states then delivered to the
   *  `presence_changed` handlers. */
  async watchPresence(userIds: readonly string[]): Promise<PresenceChanged[]> {
    const ids = [...userIds];
    const states = await this.hub.invoke<PresenceChanged[]>("WatchPresence", ids);
    for (const id of ids) this.watched.add(String(id));
    return states;
  }

  async unwatchPresence(userIds: readonly string[]): Promise<void> {
    for (const id of userIds) this.watched.delete(String(id));
    await this.hub.invoke("UnwatchPresence", [...userIds]);
  }

  onDuplicate(handler: (chatId: Key, seq: number) => void): void {
    this.duplicateHandlers.push(handler);
  }

  onResync(handler: (chatId: string, recovered: TimelineMessage[]) => void): void {
    this.resyncHandlers.push(handler);
  }

  onConnection(handler: (up: boolean, reconnect: boolean) => void): void {
    this.connectionHandlers.push(handler);
  }

  /** After a reconnect resumed from the cursor: how many events came from GET /api/sync that
   *  the hub had not delivered. */
  onResumed(handler: (missed: number) => void): void {
    this.resumedHandlers.push(handler);
  }

  timeline(chatId: Key): Timeline {
    let timeline = this.timelines.get(chatId);
    if (timeline === undefined) {
      timeline = new Timeline(chatId);
      this.timelines.set(chatId, timeline);
    }
    return timeline;
  }

  chats(): Key[] {
    return [...this.timelines.keys()];
  }

  /** Follow a chat: its history now, and a resync on every reconnect. */
  async track(chatId: string): Promise<Timeline> {
    await this.resync(chatId);
    return this.timeline(chatId);
  }

  /** Fetch what the chat's timeline misses, and wait for it (with your own `resync`: read on
   *  from the sync cursor). */
  async resync(chatId: string, overlap = 0): Promise<void> {
    this.timeline(chatId);
    if (this.options.resync !== undefined) {
      await this.requestResume();
      await this.settled();
      return;
    }
    this.requestSync(chatId, overlap);
    await this.syncing.get(chatId);
  }

  /** Wait until no resume, keep-up read, resync or seeding runs. */
  async settled(): Promise<void> {
    while (this.syncing.size || this.seeding.size || this.resuming !== null) {
      await Promise.all([...this.syncing.values(), ...this.seeding, this.resuming]);
    }
  }

  /** Send a message with a client message id, retrying a failed attempt safely: the server
   *  answers a repeat with the first result (where it supports clientMessageId). */
  async send(chatId: string, body: string | null, options: SendOptions = {}, attempts = 3) {
    const request = { ...options, clientMessageId: options.clientMessageId ?? newClientMessageId() };
    for (let attempt = 1; ; attempt += 1) {
      try {
        return await this.rest.sendMessage(chatId, body, request);
      } catch (error) {
        const transient = !(error instanceof RestError) || error.status >= 500;
        if (!transient || attempt >= attempts) throw error;
        await sleep(200 * attempt);
      }
    }
  }

  // --- inside -----------------------------------------------------------------------------

  private async currentToken(): Promise<string> {
    this.token ??= await this.options.token();
    return this.token;
  }

  private async refreshAfter(error: unknown): Promise<boolean> {
    const status = (error as { statusCode?: number }).statusCode;
    const refused = status === 401 || /401|Unauthorized/.test(String(error));
    if (!refused || this.options.refreshToken === undefined) return false;
    this.token = await this.options.refreshToken();
    this.stats.tokenRefreshes += 1;
    return true;
  }

  /** Start the hub connection; a refused token is refreshed once and the start tried again. */
  private async connect(): Promise<void> {
    try {
      await this.hub.start();
    } catch (error) {
      if (!(await this.refreshAfter(error))) throw error;
      await this.hub.start();
    }
  }

  private async restart(): Promise<void> {
    while (!this.stopped) {
      await sleep(1000);
      if (this.stopped || this.hub.state !== HubConnectionState.Disconnected) return;
      try {
        await this.connect();
        await this.connected(true);
        return;
      } catch {
        // still down: try again
      }
    }
  }

  private async connected(reconnect: boolean): Promise<void> {
    this.stats.connects += 1;
    this.emitConnection(true, reconnect);
    this.syncOff = false; // ask again: the server may have been upgraded meanwhile
    if (reconnect) this.requestRewatch();
    await this.requestResume();
  }

  /** After a reconnect: watch the remembered ids again on the new connection. */
  private requestRewatch(): void {
    if (this.rewatching !== null) {
      this.rewatchAgain = true; // reconnected again while watching again
    } else if (this.watched.size > 0) {
      this.rewatching = this.rewatch().finally(() => {
        this.rewatching = null;
      });
    }
  }

  private async rewatch(): Promise<void> {
    do {
      this.rewatchAgain = false;
      const ids = [...this.watched];
      let states: PresenceChanged[] = [];
      try {
        states = ids.length > 0 ? await this.hub.invoke<PresenceChanged[]>("WatchPresence", ids) : [];
      } catch {
        states = []; // down again (the next reconnect watches again) or past the limit
      }
      if (ids.join("\n") !== [...this.watched].join("\n")) this.rewatchAgain = true;
      for (const state of states) {
        if (this.watched.has(String(state.userId))) this.signal("presence_changed", state);
      }
    } while (this.rewatchAgain);
  }

  /** Events of this name go through `receive` (registered with the official client once). */
  private listen(name: string): void {
    if (this.listened.has(name)) return;
    this.listened.add(name);
    this.hub.on(name, (payload: unknown) => this.receive(name, payload));
  }

  /** A live event with an eventId: past `cursorEvery` since the last read, or after
   *  `cursorIdleMs` of quiet, the cursor keeps up. */
  private countLive(): void {
    this.unread += 1;
    if (this.unread >= (this.options.cursorEvery ?? 1000)) {
      this.keepUp();
      return;
    }
    const idle = this.options.cursorIdleMs === undefined ? 5000 : this.options.cursorIdleMs;
    if (idle === null) return;
    this.clearIdle();
    this.idleTimer = setTimeout(() => {
      this.idleTimer = null;
      if (this.unread > 0) this.keepUp();
    }, idle);
  }

  private clearIdle(): void {
    if (this.idleTimer !== null) clearTimeout(this.idleTimer);
    this.idleTimer = null;
  }

  private keepUp(): void {
    if (this.cursor === null || this.stopped || this.syncOff || !this.isConnected) return;
    this.unread = 0;
    this.clearIdle();
    void this.requestResume(false);
  }

  /** A read on from the cursor: a resume (`report`: counted, onResumed told) or a keep-up read.
   *  One at a time: asked again meanwhile, it reads on once more. */
  private async requestResume(report = true): Promise<void> {
    this.report ||= report;
    if (this.resuming !== null) {
      this.resumeAgain = true; // asked again while resuming: read on once more
      return;
    }
    const run = this.resume()
      .catch((error: unknown) => {
        if (!this.stopped) throw error;
      })
      .finally(() => {
        this.resuming = null;
      });
    this.resuming = run;
    await run;
  }

  private async resume(): Promise<void> {
    do {
      this.resumeAgain = false;
      const report = this.report;
      this.report = false;
      try {
        if (this.cursor === null) {
          this.cursor = (await this.syncPage(null)).nextCursor;
          await this.fullResync("start");
        } else {
          await this.readOn(report);
        }
      } catch (error) {
        if (!(error instanceof RestError)) throw error;
        this.cursor = null; // a server without /api/sync: resync as before
        this.syncOff = this.options.resync !== undefined && (error.status === 404 || error.status === 405);
        await this.fullResync("sync_off");
      }
    } while (this.resumeAgain && !this.stopped);
  }

  /** Sync pages from the cursor until the last for now (short, without `more`); `limited` → the
   *  full resync. */
  private async readOn(report = true): Promise<void> {
    const limit = this.options.syncPage ?? SYNC_LIMIT;
    let missed = 0;
    let held = 0;
    let read = 0;
    for (;;) {
      const page = await this.syncPage(this.cursor);
      if (page.limited) {
        this.cursor = page.nextCursor;
        await this.fullResync("limited");
        return;
      }
      read += page.events.length;
      for (const item of page.events) {
        if (this.apply(item.target, item.payload, false)) missed += 1;
      }
      this.cursor = page.nextCursor;
      if (page.heldBack) {
        held += 1; // a transaction still open holds newer events back: ask again shortly
        await sleep(Math.min(2000, 100 * 2 ** (held - 1)));
      } else if (!page.more && page.events.length < limit) {
        // The end for now. A page that stopped at the server's scan bound says `more`, however
        // few events it holds (none, even); a full one from a server before `more` is followed.
        break;
      }
    }
    if (!report) {
      this.stats.cursorReads += 1; // a keep-up read: what it brought new was delivered all the same
      return;
    }
    this.stats.lastResumeRead = read;
    this.stats.resumes += 1;
    this.stats.missed += missed;
    for (const handler of this.resumedHandlers) handler(missed);
  }

  /** One sync page, retried with full-jitter backoff (or Retry-After) on 5xx, 429 and network
   *  errors; a refused cursor is dropped for a fresh one, as if `limited`. */
  private async syncPage(since: string | null): Promise<SyncPageOut> {
    for (let failures = 1; ; failures += 1) {
      try {
        const page = await this.rest.sync(since, this.options.syncPage ?? SYNC_LIMIT);
        this.stats.syncPages += 1;
        this.stats.syncEvents += page.events.length;
        return page;
      } catch (error) {
        if (error instanceof RestError && error.status === 401 && (await this.refreshAfter(error))) continue;
        const retriable = !(error instanceof RestError) || error.status >= 500 || error.status === 429;
        if (!retriable) {
          if (since === null) throw error;
          const fresh = await this.syncPage(null);
          return { ...fresh, limited: true };
        }
        if (this.stopped) throw error;
        let delay = Math.random() * Math.min(5000, 250 * 2 ** (failures - 1));
        if (error instanceof RestError && error.retryAfter !== null) {
          delay = Math.max(delay, error.retryAfter * 1000 * (1 + Math.random()));
        }
        await sleep(delay);
      }
    }
  }

  /** Your own resync when you gave one; otherwise over the reference REST API: the chat list,
   *  and every chat's history after what the timeline has. */
  private async fullResync(reason: ResyncReason): Promise<void> {
    this.stats.fullResyncs += 1;
    if (this.options.resync !== undefined) {
      await this.options.resync(reason);
      return;
    }
    const reconnect = reason !== "start";
    let listed: ChatSummary[] | null = null;
    try {
      listed = await this.rest.listChats();
    } catch {
      listed = null; // the chat list is a bonus: resync still covers the tracked chats
    }
    for (const chat of listed ?? []) {
      if (this.timelines.has(chat.chatId) || (chat.lastSeq ?? 0) > 0) this.timeline(chat.chatId);
    }
    // (the reference messenger's REST API: uuid keys, strings)
    for (const chatId of this.timelines.keys()) this.requestSync(String(chatId), reconnect ? this.overlap : 0);
  }

  private emitConnection(up: boolean, reconnect: boolean): void {
    for (const handler of this.connectionHandlers) handler(up, reconnect);
  }

  /** One push from the hub (also usable to replay one, as a duplicate would arrive). */
  receive(event: EventName | string, payload: unknown): void {
    if (this.options.inspect !== undefined && !this.options.inspect(event as EventName, payload)) return;
    this.apply(event, payload, true);
  }

  /** The one dedupe (eventId, then (chatId, seq)) and the handlers; true when it was new.
   *  `live`: it came from the hub, not from a sync page. */
  private apply(event: string, payload: unknown, live: boolean): boolean {
    if (payload === null || typeof payload !== "object" || Array.isArray(payload)) return false;
    const data = payload as Record<string, unknown>;
    const chatId = typeof data.chatId === "string" || typeof data.chatId === "number" ? data.chatId : null;
    const eventId = typeof data.eventId === "string" ? data.eventId : null;
    let change: Change | null = null;
    let seq = typeof data.seq === "number" ? data.seq : 0;
    if (live && eventId !== null) this.countLive();
    if (eventId !== null && this.seen.has(eventId)) {
      this.duplicate(chatId, seq);
      return false;
    }
    if (eventId !== null) {
      this.seen.add(eventId);
      if (this.seen.size > (this.options.seenCapacity ?? 20_000)) {
        this.seen.delete(this.seen.values().next().value as string); // the oldest
      }
    }
    // No message of the chat heard of yet (a read receipt may have come: it tells no seq).
    const unheard = chatId !== null && (this.timelines.get(chatId)?.highestSeq ?? 0) === 0;
    if (chatId !== null && unheard) this.firstSeen(chatId, event, data);
    if (chatId !== null && (EVENT_NAMES as readonly string[]).includes(event)) {
      const timeline = this.timeline(chatId);
      if (event === "message_received") {
        const m = payload as MessageReceived;
        seq = m.seq;
        change = timeline.add({
          chatId, messageId: m.messageId, seq: m.seq, senderUserId: m.senderUserId ?? null,
          kind: m.kind, body: m.body ?? null, sentAt: m.sentAt, editedAt: null, deletedAt: null,
          fileMeta: m.fileMeta ?? null, cardText: m.cardText ?? null,
        });
      } else if (event === "message_edited") {
        const m = payload as HubEvents["message_edited"];
        seq = m.seq;
        change = timeline.edit(m.messageId, m.seq, m.body ?? null, m.editedAt, m.cardText);
      } else if (event === "message_deleted") {
        const m = payload as HubEvents["message_deleted"];
        seq = m.seq;
        change = timeline.delete(m.messageId, m.seq, m.deletedAt);
      } else if (event === "read_receipt_updated") {
        const r = payload as HubEvents["read_receipt_updated"];
        seq = r.lastReadSeq;
        change = timeline.read(r.userId, r.lastReadSeq) ? "updated" : "duplicate";
      }
    }
    if (change === "duplicate") {
      this.duplicate(chatId, seq);
    } else {
      for (const handler of this.handlers.get(event) ?? []) (handler as (p: unknown) => void)(payload);
    }
    if (chatId !== null && change !== null && this.timeline(chatId).hasGap) {
      if (this.options.resync === undefined) this.requestSync(String(chatId), 0);
      else if (!this.syncOff) void this.requestResume(); // the missing seq comes from the cursor on
    }
    return change !== "duplicate";
  }

  /** A chat whose first event came (live, or in a resume's page), with your own resync (your own
   *  schema): what came before is your history, not a gap to read over sync. Its timeline starts at this event, and
   *  a hook declared with two parameters is asked to seed it. */
  private firstSeen(chatId: Key, event: string, data: Record<string, unknown>): void {
    const resync = this.options.resync;
    if (resync === undefined || typeof data.seq !== "number" || !MESSAGE_EVENTS.has(event)) return;
    this.timeline(chatId).startAfter(event === "message_received" ? data.seq - 1 : data.seq);
    if (resync.length < 2) return;
    this.stats.seeded += 1;
    const run: Promise<void> = Promise.resolve()
      .then(() => resync("new_chat", chatId))
      .catch((error: unknown) => {
        console.error("messenger client: the resync hook failed for a new chat", error);
      })
      .finally(() => this.seeding.delete(run));
    this.seeding.add(run);
  }

  private signal(name: SignalName, payload: unknown): void {
    if (this.options.inspect !== undefined && !this.options.inspect(name, payload)) return;
    for (const handler of this.handlers.get(name) ?? []) (handler as (p: unknown) => void)(payload);
  }

  private duplicate(chatId: Key | null, seq: number): void {
    this.stats.duplicatesDropped += 1;
    for (const handler of this.duplicateHandlers) handler(chatId as Key, seq);
  }

  private requestSync(chatId: string, overlap: number): void {
    this.wanted.set(chatId, Math.max(this.wanted.get(chatId) ?? 0, overlap));
    if (this.syncing.has(chatId)) return;
    const run = this.syncLoop(chatId).finally(() => this.syncing.delete(chatId));
    this.syncing.set(chatId, run);
  }

  private async syncLoop(chatId: string): Promise<void> {
    let delay = 250;
    while (this.wanted.has(chatId) && !this.stopped) {
      const overlap = this.wanted.get(chatId) ?? 0;
      this.wanted.delete(chatId);
      try {
        const timeline = this.timeline(chatId);
        const after = Math.max(0, timeline.contiguousSeq - overlap);
        const recovered = timeline.addHistory(await this.rest.historyAfter(chatId, after));
        this.stats.refetches += 1;
        this.stats.recovered += recovered.length;
        delay = 250;
        for (const handler of this.resyncHandlers) handler(chatId, recovered);
      } catch (error) {
        if (error instanceof RestError && error.status === 401 && (await this.refreshAfter(error))) {
          this.wanted.set(chatId, Math.max(this.wanted.get(chatId) ?? 0, overlap));
          continue;
        }
        if (error instanceof RestError && error.status < 500) return; // no longer a member
        this.wanted.set(chatId, Math.max(this.wanted.get(chatId) ?? 0, overlap));
        await sleep(delay);
        delay = Math.min(delay * 2, 5000);
      }
    }
  }
}

function newClientMessageId(): string {
  return globalThis.crypto.randomUUID();
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
