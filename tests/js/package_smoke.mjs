// The packed SDK as an app installs it: run from a scratch project whose node_modules hold the
// tarball of @realtime-dispatch/client beside one major of @microsoft/signalr (the app's own),
// against a real `serve` (tests/e2e/test_js_package.py passes its URL and JWT secret). A connect,
// a push over the hub and a resume after a cut connection; prints one JSON line of what it saw.
import assert from "node:assert/strict";
import { createHmac, randomUUID } from "node:crypto";
import { connect, createServer } from "node:net";
import { VERSION } from "@microsoft/signalr";
import { MessengerClient } from "@realtime-dispatch/client";

const URL_ = process.env.SDK_TEST_URL;
const SECRET = process.env.SDK_TEST_JWT_SECRET;
if (!URL_ || !SECRET) throw new Error("run through tests/e2e/test_js_package.py");

const b64 = (data) => Buffer.from(JSON.stringify(data)).toString("base64url");
function token(userId) {
  const head = b64({ alg: "HS256", typ: "JWT" });
  const body = b64({ sub: userId, exp: Math.floor(Date.now() / 1000) + 600 });
  const sig = createHmac("sha256", SECRET).update(`${head}.${body}`).digest("base64url");
  return `${head}.${body}.${sig}`;
}

async function until(predicate, what, within = 20_000) {
  const end = Date.now() + within;
  while (!predicate()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

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

const alice = randomUUID(), bob = randomUUID();
const via = await proxy(Number(new URL(URL_).port));
let blocked = false;
const options = (user) => ({ token: () => token(user), reconnectDelays: [0, 100, 300] });
const a = new MessengerClient(URL_, options(alice));
const b = new MessengerClient(via.url, { ...options(bob), inspect: () => !blocked });
const pushed = [], ups = [];
b.on("message_received", (m) => pushed.push(m.body));
b.onConnection((up, reconnect) => ups.push([up, reconnect]));
try {
  // connect
  await a.start();
  await b.start();
  assert.equal(b.isConnected, true);
  // a push over the hub
  const { chatId } = await a.rest.createChat("package", [bob]);
  const timeline = await b.track(chatId);
  await a.send(chatId, "pushed");
  await until(() => timeline.size === 1, "the push");
  // a resume: the connection is cut, a message is written meanwhile and never pushed to Bob
  blocked = true;
  via.cut();
  await a.send(chatId, "missed");
  await until(() => ups.some(([up, reconnect]) => up && reconnect), "the reconnect");
  await until(() => timeline.size === 2, "the resume");
  blocked = false;
  console.log(JSON.stringify({
    signalr: VERSION,
    pushed,
    timeline: timeline.messages().map((m) => m.body),
    resumes: b.stats.resumes,
    missed: b.stats.missed,
    recovered: b.stats.recovered,
  }));
} finally {
  await Promise.all([a.stop(), b.stop()]);
  via.close();
}
