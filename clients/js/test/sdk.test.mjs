// The SDK against a real `realtime-dispatch serve` (started by tests/e2e/test_js_sdk.py, which
// passes its URL, JWT secret and service key in the environment). Run: node --test clients/js/test/
import assert from "node:assert/strict";
import { createHmac, randomUUID } from "node:crypto";
import { createServer, connect } from "node:net";
import { after, test } from "node:test";
import { MessengerClient } from "../dist/index.js";

const URL_ = process.env.SDK_TEST_URL;
const SECRET = process.env.SDK_TEST_JWT_SECRET;
const SERVICE_KEY = process.env.SDK_TEST_SERVICE_KEY;
if (!URL_ || !SECRET || !SERVICE_KEY) throw new Error("run through tests/e2e/test_js_sdk.py");

const b64 = (data) => Buffer.from(JSON.stringify(data)).toString("base64url");
function token(userId, ttlSeconds = 600) {
  const head = b64({ alg: "HS256", typ: "JWT" });
  const body = b64({ sub: userId, exp: Math.floor(Date.now() / 1000) + ttlSeconds });
  const sig = createHmac("sha256", SECRET).update(`${head}.${body}`).digest("base64url");
  return `${head}.${body}.${sig}`;
}

const clients = [];
function client(userId, extra = {}, base = URL_) {
  const made = new MessengerClient(base, { token: () => token(userId), reconnectDelays: [0, 100, 300], ...extra });
  clients.push(made);
  return made;
}
after(async () => { await Promise.all(clients.map((c) => c.stop())); });

async function until(predicate, what, within = 10_000) {
  const end = Date.now() + within;
  while (!predicate()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const bodies = (timeline) => timeline.messages().map((m) => m.body);

test("two users chat", async () => {
  const alice = randomUUID(), bob = randomUUID();
  const a = client(alice), b = client(bob);
  const received = [];
  b.on("message_received", (m) => received.push(m.body));
  await a.start();
  await b.start();
  const { chatId } = await a.rest.createChat("js", [bob]);
  const tb = await b.track(chatId);
  const ta = await a.track(chatId);
  await a.send(chatId, "hi Bob");
  await until(() => tb.size === 1, "Bob's first message");
  await b.send(chatId, "hi Alice");
  await until(() => ta.size === 2, "Alice's timeline");
  assert.deepEqual(bodies(ta), ["hi Bob", "hi Alice"]);
  assert.deepEqual(bodies(tb), ["hi Bob", "hi Alice"]);
  assert.deepEqual(received, ["hi Bob", "hi Alice"]); // over the hub, not from REST
  assert.equal(b.stats.recovered, 0);
  const [first] = ta.messages();
  await a.rest.editMessage(chatId, first.messageId, "hi Bob!");
  await until(() => tb.messages()[0].body === "hi Bob!", "the edit");
  assert.equal(tb.messages()[0].editedAt !== null, true);
});

test("a duplicated push is dropped", async () => {
  const alice = randomUUID();
  const a = client(alice);
  const seen = [], dupes = [];
  a.on("message_received", (m) => seen.push(m.seq));
  a.onDuplicate((chatId, seq) => dupes.push(seq));
  await a.start();
  const { chatId } = await a.rest.createChat("dupes", []);
  const timeline = await a.track(chatId);
  await a.send(chatId, "once");
  await until(() => seen.length === 1, "the push");
  const [message] = timeline.messages();
  // The same payload pushed again through the hub, as an at-least-once redelivery would.
  const again = await fetch(`${URL_}/api/v1/hubs/messenger/groups/${encodeURIComponent(`chat:${chatId}`)}`, {
    method: "POST",
    headers: { Authorization: `Bearer ${SERVICE_KEY}`, "Content-Type": "application/json" },
    body: JSON.stringify({ target: "message_received", arguments: [{ chatId, messageId: message.messageId, seq: 1, senderUserId: alice, kind: "Text", sentAt: message.sentAt, body: "once" }] }),
  });
  assert.equal(again.status, 202);
  await until(() => dupes.length === 1, "the duplicate");
  assert.deepEqual(dupes, [1]);
  assert.deepEqual(seen, [1]);
  assert.equal(timeline.size, 1);
  assert.equal(a.stats.duplicatesDropped, 1);
});

test("a lost push is repaired from REST", async () => {
  const alice = randomUUID(), bob = randomUUID();
  const a = client(alice);
  let lose = 2;
  const b = client(bob, { inspect: (event, payload) => !(event === "message_received" && payload.seq === lose) });
  const recovered = [];
  b.onResync((chatId, found) => recovered.push(...found.map((m) => m.seq)));
  await a.start();
  await b.start();
  const { chatId } = await a.rest.createChat("lossy", [bob]);
  const timeline = await b.track(chatId);
  for (const text of ["one", "two", "three"]) await a.send(chatId, text);
  await until(() => timeline.contiguousSeq === 3, "the gap to be filled");
  lose = 0;
  assert.deepEqual(bodies(timeline), ["one", "two", "three"]);
  assert.deepEqual(recovered, [2]);
  assert.equal(b.stats.recovered, 1);
});

// A TCP proxy in front of serve whose connections can be cut, as a network failure would.
async function proxy(port) {
  const sockets = new Set();
  const server = createServer((inbound) => {
    const outbound = connect(port, "127.0.0.1");
    sockets.add(inbound).add(outbound);
    inbound.pipe(outbound).pipe(inbound);
    for (const s of [inbound, outbound]) s.on("error", () => {}).on("close", () => sockets.delete(s));
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    cut: () => { for (const s of sockets) s.destroy(); },
    close: () => { for (const s of sockets) s.destroy(); server.close(); },
  };
}

test("a cut connection reconnects and resumes from the sync cursor", async () => {
  const alice = randomUUID(), bob = randomUUID();
  const a = client(alice);
  const via = await proxy(Number(new URL(URL_).port));
  let blocked = false;
  const b = client(bob, { inspect: () => !blocked }, via.url);
  const ups = [];
  b.onConnection((up, reconnect) => ups.push([up, reconnect]));
  try {
    await a.start();
    await b.start();
    const { chatId } = await a.rest.createChat("cut", [bob]);
    const timeline = await b.track(chatId);
    await a.send(chatId, "before");
    await until(() => timeline.size === 1, "the first message");
    blocked = true; // pushes around the cut never reach the timeline: only the resume can
    via.cut();
    await a.send(chatId, "during");
    await until(() => ups.some(([up, reconnect]) => !up && reconnect), "reconnecting");
    await until(() => ups.some(([up, reconnect]) => up && reconnect), "reconnected");
    await until(() => timeline.size === 2, "the resume");
    blocked = false;
    assert.deepEqual(bodies(timeline), ["before", "during"]);
    assert.ok(b.stats.connects >= 2);
    assert.ok(b.stats.resumes >= 1);
    assert.ok(b.stats.missed >= 1); // "during" came from GET /api/sync, not from REST history
    assert.equal(b.stats.fullResyncs, 1); // the first connect only
    assert.equal(b.stats.recovered, 0);
  } finally {
    via.close();
  }
});

test("an expired token triggers the refresh callback", async () => {
  const alice = randomUUID();
  const refreshed = [];
  const a = client(alice, {
    token: () => token(alice, -60), // already expired
    refreshToken: () => { refreshed.push(Date.now()); return token(alice); },
  });
  await a.start();
  assert.equal(refreshed.length, 1);
  assert.equal(a.isConnected, true);
  assert.equal(a.stats.tokenRefreshes, 1);
  const { chatId } = await a.rest.createChat("fresh", []);
  await a.track(chatId);
  await a.send(chatId, "with a fresh token");
  await until(() => a.timeline(chatId).size === 1, "the message");
});

test("typing and presence", async () => {
  const alice = randomUUID(), bob = randomUUID();
  const a = client(alice), b = client(bob);
  const typing = [], presence = [];
  a.on("user_typing", (t) => typing.push(t));
  a.on("presence_changed", (p) => presence.push(p));
  await a.start();
  const { chatId } = await a.rest.createChat("signals", [bob]);
  // Presence shows through a chat its user took part in (created, read in, sent to): Bob, not
  // connected yet, answers over REST first. Before that, Alice's watch is refused.
  assert.deepEqual(await a.watchPresence([bob]), []);
  await b.rest.sendMessage(chatId, "here");
  const states = await a.watchPresence([bob, randomUUID()]);
  assert.deepEqual(states.map((s) => [s.userId, s.online]), [[bob, false]]);
  await b.start();
  await until(() => presence.some((p) => p.userId === bob && p.online), "Bob online");
  await b.typing(chatId);
  await until(() => typing.length === 1, "Bob typing");
  assert.equal(typing[0].userId, bob);
  assert.equal(typing[0].chatId, chatId);
  await assert.rejects(b.typing(randomUUID()), /not a member/);
  await a.unwatchPresence([bob]);
});

test("an event of your own name reaches on(name), deduplicated by eventId, in order", async () => {
  const alice = randomUUID();
  const a = client(alice);
  const order = [];
  a.on("reaction_added", (p) => order.push(`reaction ${p.emoji}`));
  a.on("contact_request_received", () => order.push("request"));
  await a.start();
  const push = (target, payload) =>
    fetch(`${URL_}/api/v1/hubs/messenger/groups/${encodeURIComponent(`user:${alice}`)}`, {
      method: "POST",
      headers: { Authorization: `Bearer ${SERVICE_KEY}`, "Content-Type": "application/json" },
      body: JSON.stringify({ target, arguments: [payload] }),
    });
  const reaction = { eventId: randomUUID(), chatId: randomUUID(), emoji: "👍" };
  const request = {
    eventId: randomUUID(), requestId: randomUUID(), fromUserId: randomUUID(), toUserId: alice,
    status: "Pending", createdAt: new Date().toISOString(),
  };
  assert.equal((await push("reaction_added", reaction)).status, 202);
  assert.equal((await push("contact_request_received", request)).status, 202);
  assert.equal((await push("reaction_added", reaction)).status, 202); // a second copy
  await until(() => order.length === 2 && a.stats.duplicatesDropped === 1, "the events");
  assert.deepEqual(order, ["reaction 👍", "request"]);
});

test("the cursor keeps up: a resume reads what it missed, not the session", async () => {
  const alice = randomUUID(), bob = randomUUID();
  const a = client(alice);
  const via = await proxy(Number(new URL(URL_).port));
  let blocked = false;
  const b = client(bob, { inspect: () => !blocked, cursorEvery: 3, cursorIdleMs: null }, via.url);
  const resumed = [];
  b.onResumed((missed) => resumed.push(missed));
  try {
    await a.start();
    await b.start();
    const { chatId } = await a.rest.createChat("keep-up", [bob]);
    const timeline = await b.track(chatId);
    for (let n = 1; n <= 6; n += 1) await a.send(chatId, `live ${n}`);
    await until(() => timeline.size === 6 && b.stats.cursorReads >= 2, "the keep-up reads");
    await b.settled();
    blocked = true;
    via.cut();
    await a.send(chatId, "during 1");
    await a.send(chatId, "during 2");
    await until(() => resumed.length >= 1 && timeline.size === 8, "the resume");
    blocked = false;
    // What it missed, plus at most what came live since the last keep-up read (3 here).
    assert.ok(b.stats.lastResumeRead >= 2 && b.stats.lastResumeRead <= 2 + 3, String(b.stats.lastResumeRead));
    assert.equal(b.stats.fullResyncs, 1);
  } finally {
    await b.stop();
    via.close();
  }
});

test("100 live pushes into chats first seen live cost no sync call; the hook seeds them", async () => {
  const bob = randomUUID();
  const senders = Array.from({ length: 10 }, () => client(randomUUID()));
  const chats = [];
  let delivered = 0; // each sender's own "before" back live: the chats' rows are pushed
  for (const sender of senders) {
    sender.on("message_received", (m) => { if (m.body === "before") delivered += 1; });
    await sender.start();
    const { chatId } = await sender.rest.createChat("unseen", [bob]);
    await sender.send(chatId, "before");
    chats.push(chatId);
  }
  // Bob starts once the creations and the "before" messages were pushed, so that none of them
  // comes live after his start (a late push into a chat he never saw asks the hook too).
  await until(() => delivered === senders.length, "the senders' own pushes", 30_000);
  const asked = [];
  const b = client(bob, {
    cursorIdleMs: null,
    resync: async (reason, chatId) => {
      asked.push(reason);
      if (reason === "new_chat") b.seed(chatId, await b.rest.historyAfter(chatId, 0));
    },
  });
  await b.start();
  await b.settled();
  assert.deepEqual(asked, ["start"]);
  const pages = b.stats.syncPages;
  for (let n = 0; n < 10; n += 1) {
    await Promise.all(senders.map((sender, i) => sender.send(chats[i], `live ${n}`)));
  }
  // The timelines, not the live callbacks, are what must be complete: a message the hook's
  // history read already held arrives live as a duplicate and is dropped there.
  const complete = () => chats.every((chatId) => b.timeline(chatId).contiguousSeq === 11);
  try {
    await until(complete, "100 live pushes in the timelines", 30_000);
  } catch (error) {
    throw new Error(`${error.message}: ${JSON.stringify(b.stats)}`);
  }
  await b.settled();
  assert.equal(b.stats.syncPages - pages, 0);
  assert.equal(b.stats.seeded, 10);
  assert.equal(asked.filter((r) => r === "new_chat").length, 10);
  for (const chatId of chats) {
    const timeline = b.timeline(chatId);
    assert.equal(timeline.contiguousSeq, 11);
    assert.equal(timeline.hasGap, false);
  }
});
