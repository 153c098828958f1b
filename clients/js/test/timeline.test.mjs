// The timeline's rules, pure (no server): the same cases as the Python SDK's timeline tests.
import assert from "node:assert/strict";
import { test } from "node:test";
import { Timeline } from "../dist/index.js";

const msg = (seq, extra = {}) => ({
  chatId: "c", messageId: `m${seq}`, seq, senderUserId: "u", kind: "Text", body: `b${seq}`,
  sentAt: "2026-01-01T00:00:00Z", editedAt: null, deletedAt: null, fileMeta: null, cardText: null, ...extra,
});

test("dedupe, order and gaps", () => {
  const t = new Timeline("c");
  assert.equal(t.add(msg(2)), "added");
  assert.equal(t.hasGap, true);
  assert.equal(t.add(msg(1)), "added");
  assert.equal(t.add(msg(1)), "duplicate");
  assert.deepEqual(t.messages().map((m) => m.seq), [1, 2]);
  assert.equal(t.contiguousSeq, 2);
  assert.equal(t.edit("m9", 9, "x", "2026-01-01T00:01:00Z"), "unknown");
  assert.equal(t.hasGap, true);
});

test("the later edit wins in any order, a deletion sticks, a card edit changes its text", () => {
  const t = new Timeline("c");
  t.add(msg(1));
  assert.equal(t.edit("m1", 1, "late", "2026-01-01T00:02:00Z"), "updated");
  assert.equal(t.edit("m1", 1, "early", "2026-01-01T00:01:00Z"), "duplicate");
  assert.equal(t.get("m1").body, "late");
  t.add(msg(2, { kind: "Card", body: null, cardText: "v1" }));
  assert.equal(t.edit("m2", 2, null, "2026-01-01T00:03:00Z", "v2"), "updated");
  assert.equal(t.get("m2").cardText, "v2");
  assert.equal(t.delete("m1", 1, "2026-01-01T00:04:00Z"), "updated");
  assert.equal(t.add(msg(1, { body: "late", editedAt: "2026-01-01T00:02:00Z" })), "duplicate");
  assert.equal(t.get("m1").body, null);
  assert.equal(t.read("u2", 2), true);
  assert.equal(t.read("u2", 1), false);
});
