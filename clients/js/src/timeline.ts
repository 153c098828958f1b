// A chat's timeline: messages keyed by their per-chat seq, deduplicated, edits and deletions
// applied, and the first missing seq. Pure (no I/O); the same rules as the Python SDK's
// realtime_dispatch.client.timeline.

import type { Key } from "./contracts.js";

export interface TimelineMessage {
  chatId: Key;
  messageId: Key;
  seq: number;
  senderUserId: Key | null;
  kind: string;
  body: string | null;
  sentAt: string;
  editedAt: string | null;
  deletedAt: string | null;
  fileMeta: Record<string, unknown> | null;
  cardText: string | null;
}

/** "added": new here; "duplicate": nothing changed (dropped); "updated": an edit or deletion
 *  changed it; "unknown": an edit or deletion of a message not here yet (a gap). */
export type Change = "added" | "duplicate" | "updated" | "unknown";

/** Two views of one message, newest state wins: a deletion sticks (and drops the content);
 *  otherwise the view with the later editedAt (unedited counts as oldest) gives the body. */
export function merge(current: TimelineMessage, incoming: Partial<TimelineMessage>): TimelineMessage {
  const deletedAt = current.deletedAt ?? incoming.deletedAt ?? null;
  if (deletedAt !== null) return { ...current, body: null, fileMeta: null, cardText: null, deletedAt };
  const keep =
    current.editedAt !== null &&
    (incoming.editedAt == null || Date.parse(incoming.editedAt) < Date.parse(current.editedAt));
  const newer = keep ? current : incoming;
  const cardText = newer.cardText === undefined ? current.cardText : newer.cardText;
  return { ...current, body: newer.body ?? null, editedAt: newer.editedAt ?? null, cardText };
}

const same = (a: TimelineMessage, b: TimelineMessage): boolean =>
  a.body === b.body && a.editedAt === b.editedAt && a.deletedAt === b.deletedAt && a.cardText === b.cardText;

export class Timeline {
  readonly readMarks = new Map<Key, number>();
  private readonly bySeq = new Map<number, TimelineMessage>();
  private readonly seqOf = new Map<Key, number>();
  private contiguous = 0;
  private highest = 0;

  constructor(readonly chatId: Key) {}

  /** Every seq from 1 to this one is here: REST resumes with afterSeq = this. */
  get contiguousSeq(): number {
    return this.contiguous;
  }

  /** The highest seq heard of (from a message, an edit or a deletion). */
  get highestSeq(): number {
    return this.highest;
  }

  get hasGap(): boolean {
    return this.highest > this.contiguous;
  }

  get size(): number {
    return this.bySeq.size;
  }

  messages(): TimelineMessage[] {
    return [...this.bySeq.values()].sort((a, b) => a.seq - b.seq);
  }

  get(messageId: Key): TimelineMessage | undefined {
    const seq = this.seqOf.get(messageId);
    return seq === undefined ? undefined : this.bySeq.get(seq);
  }

  /** A pushed or fetched message; a second copy is dropped, a fetched copy merged. */
  add(message: TimelineMessage): Change {
    if (message.chatId !== this.chatId) throw new Error("message of another chat");
    const seq = this.seqOf.get(message.messageId) ?? message.seq;
    const current = this.bySeq.get(seq);
    if (current !== undefined) {
      const merged = merge(current, message);
      if (same(merged, current)) return "duplicate";
      this.bySeq.set(seq, merged);
      return "updated";
    }
    this.bySeq.set(message.seq, message);
    this.seqOf.set(message.messageId, message.seq);
    this.highest = Math.max(this.highest, message.seq);
    while (this.bySeq.has(this.contiguous + 1)) this.contiguous += 1;
    return "added";
  }

  /** An edit: the new body, or a card's new text. */
  edit(messageId: Key, seq: number, body: string | null, editedAt: string, cardText?: string | null): Change {
    return this.change(messageId, seq, cardText === undefined ? { body, editedAt } : { body, editedAt, cardText });
  }

  delete(messageId: Key, seq: number, deletedAt: string): Change {
    return this.change(messageId, seq, { deletedAt });
  }

  /** Merge a REST page; returns the messages that were new here. */
  addHistory(messages: TimelineMessage[]): TimelineMessage[] {
    return messages.filter((m) => this.add(m) === "added");
  }

  /** What comes before seq + 1 is the application's to show (its own history, or nothing):
   *  seqs up to `seq` no longer count as missing. For a chat first seen live on your own
   *  schema, and for a timeline seeded with the latest page of its history. Never moves back. */
  startAfter(seq: number): void {
    if (seq <= this.contiguous) return;
    this.contiguous = seq;
    this.highest = Math.max(this.highest, seq);
    while (this.bySeq.has(this.contiguous + 1)) this.contiguous += 1;
  }

  /** Your own history of this chat (its latest page, or all of it): merged like a REST page,
   *  and what is older than its oldest message is not a gap. Returns the messages new here. */
  seed(messages: TimelineMessage[]): TimelineMessage[] {
    if (messages.length > 0) this.startAfter(Math.min(...messages.map((m) => m.seq)) - 1);
    return this.addHistory(messages);
  }

  /** A read mark; marks only move forward. */
  read(userId: Key, lastReadSeq: number): boolean {
    if (lastReadSeq <= (this.readMarks.get(userId) ?? 0)) return false;
    this.readMarks.set(userId, lastReadSeq);
    return true;
  }

  private change(messageId: Key, seq: number, fields: Partial<TimelineMessage>): Change {
    const current = this.get(messageId);
    if (current === undefined) {
      // The message itself is missing: remember its seq so the gap is fetched.
      this.highest = Math.max(this.highest, seq);
      return "unknown";
    }
    const merged = merge(current, { ...current, ...fields });
    if (same(merged, current)) return "duplicate";
    this.bySeq.set(current.seq, merged);
    return "updated";
  }
}
