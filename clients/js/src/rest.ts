// The messenger REST API as the SDK uses it (fetch): history pages, the chat list, commands.
// Bodies are the server's own types (contracts.ts, generated from its pydantic models).

import type {
  ChatCreated,
  ChatOut,
  ChatPage,
  ChatSummaryOut,
  MessageOut,
  MessagePage,
  MessageSent,
  SendMessage,
  SyncPageOut,
} from "./contracts.js";
import type { TimelineMessage } from "./timeline.js";

export const PAGE_LIMIT = 200; // the API's maximum page
export const SYNC_LIMIT = 500; // events per GET /api/sync page (the API allows 1,000)

export class RestError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    /** Seconds, when the server said when to come back (Retry-After). */
    readonly retryAfter: number | null = null,
  ) {
    super(message);
    this.name = "RestError";
  }
}

/** One chat of GET /api/chats. */
export type ChatSummary = ChatSummaryOut;

/** What a message carries besides its body (kind File/Card, clientMessageId). */
export type SendOptions = Omit<SendMessage, "body">;

export function toTimeline(chatId: string, item: MessageOut): TimelineMessage {
  return {
    chatId,
    messageId: item.messageId,
    seq: item.seq,
    senderUserId: item.senderUserId,
    kind: item.kind ?? "Text",
    body: item.body,
    sentAt: item.sentAt,
    editedAt: item.editedAt,
    deletedAt: item.deletedAt,
    fileMeta: item.fileMeta ?? null,
    cardText: item.cardText ?? null,
  };
}

export class MessengerRest {
  private clientIdsSupported = true;

  constructor(
    private readonly baseUrl: string,
    private readonly token: () => Promise<string>,
    private readonly fetchImpl: typeof fetch = (...args) => globalThis.fetch(...args),
  ) {}

  async call<T>(method: string, path: string, body?: unknown): Promise<T> {
    const response = await this.fetchImpl(this.baseUrl + path, {
      method,
      headers: { Authorization: `Bearer ${await this.token()}`, "Content-Type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (!response.ok) {
      let detail: { error?: string; message?: string } = {};
      try {
        detail = (await response.json()) as typeof detail;
      } catch {
        // no JSON body
      }
      const retryAfter = Number.parseFloat(response.headers.get("Retry-After") ?? "");
      throw new RestError(
        response.status,
        detail.error ?? "",
        detail.message ?? response.statusText,
        Number.isFinite(retryAfter) ? Math.max(0, retryAfter) : null,
      );
    }
    const text = await response.text();
    return (text ? JSON.parse(text) : null) as T;
  }

  /** Every message with seq > afterSeq, page by page. */
  async historyAfter(chatId: string, afterSeq: number): Promise<TimelineMessage[]> {
    const found: TimelineMessage[] = [];
    for (;;) {
      const page = await this.call<MessagePage>(
        "GET",
        `/api/chats/${chatId}/messages?afterSeq=${afterSeq}&limit=${PAGE_LIMIT}`,
      );
      found.push(...page.items.map((item) => toTimeline(chatId, item)));
      if (page.items.length < PAGE_LIMIT) return found;
      afterSeq = page.items[page.items.length - 1].seq;
    }
  }

  /** One page of GET /api/sync: the caller's events after `since` (a nextCursor), or none and
   *  the current cursor without it. */
  sync(since: string | null, limit = SYNC_LIMIT): Promise<SyncPageOut> {
    const query = since === null ? "" : `&since=${encodeURIComponent(since)}`;
    return this.call("GET", `/api/sync?limit=${limit}${query}`);
  }

  /** The caller's chats (every page), or null where the server has no GET /api/chats. */
  async listChats(): Promise<ChatSummary[] | null> {
    const found: ChatSummary[] = [];
    let cursor: string | null = null;
    do {
      let page: ChatPage;
      try {
        const query: string = cursor === null ? "" : `?cursor=${encodeURIComponent(cursor)}`;
        page = await this.call("GET", `/api/chats${query}`);
      } catch (error) {
        if (error instanceof RestError && (error.status === 404 || error.status === 405)) return null;
        throw error;
      }
      found.push(...page.items);
      cursor = page.nextCursor ?? null;
    } while (cursor !== null);
    return found;
  }

  createChat(title: string, memberUserIds: string[]): Promise<ChatCreated> {
    return this.call("POST", "/api/chats", { title, memberUserIds });
  }

  getChat(chatId: string): Promise<ChatOut> {
    return this.call("GET", `/api/chats/${chatId}`);
  }

  /** Sends a message; a server that predates clientMessageId (it answers 422 naming the field)
   *  gets the request again without it, and never sees the field after that. */
  async sendMessage(chatId: string, body: string | null, options: SendOptions = {}): Promise<MessageSent> {
    const request: SendMessage = { ...options };
    if (body !== null) request.body = body;
    if (!this.clientIdsSupported) delete request.clientMessageId;
    try {
      return await this.call("POST", `/api/chats/${chatId}/messages`, request);
    } catch (error) {
      const refused = error instanceof RestError && error.status === 422 && error.message.includes("clientMessageId");
      if (!refused || request.clientMessageId === undefined) throw error;
      this.clientIdsSupported = false;
      delete request.clientMessageId;
      return this.call("POST", `/api/chats/${chatId}/messages`, request);
    }
  }

  editMessage(chatId: string, messageId: string, body: string): Promise<unknown> {
    return this.call("PATCH", `/api/chats/${chatId}/messages/${messageId}`, { body });
  }

  deleteMessage(chatId: string, messageId: string): Promise<void> {
    return this.call("DELETE", `/api/chats/${chatId}/messages/${messageId}`);
  }

  markRead(chatId: string, seq: number): Promise<void> {
    return this.call("POST", `/api/chats/${chatId}/read`, { seq });
  }
}
