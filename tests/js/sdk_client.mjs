// Drives the TypeScript SDK (clients/js/dist, built by tsc) against a hub for the e2e tests, as
// an application on its own schema uses it: no reference REST API, its own resync hook.
// Usage: node sdk_client.mjs '{"url": "http://…", "token": "…", "transport": "WebSockets|
//   ServerSentEvents|LongPolling", "targets": ["message_received", …]}'
// Prints one JSON object per line: {"event": "started", "transport": <its class name>}, {"event": "message", "target", "args"},
// {"event": "resync", "reason"}, {"event": "resumed", "missed"}, {"event": "requests", "paths"}
// (on a {"report": true} line: every path the SDK requested over fetch), {"event": "watched",
// "states"} (on a {"watch": [ids]} line: client.watchPresence). Exits when stdin closes.
import { createInterface } from "node:readline";
import { MessengerClient } from "../../clients/js/dist/index.js";

const config = JSON.parse(process.argv[2]);
const emit = (event) => process.stdout.write(JSON.stringify(event) + "\n");
const paths = [];
const recording = (input, init) => {
  paths.push(new URL(String(input)).pathname);
  return globalThis.fetch(input, init);
};

const client = new MessengerClient(config.url, {
  token: () => config.token,
  transport: config.transport,
  reconnectDelays: [0, 100, 300],
  fetch: recording,
  resync: (reason) => emit({ event: "resync", reason }),
});
for (const target of config.targets ?? []) {
  client.on(target, (payload) => emit({ event: "message", target, args: [payload] }));
}
client.onResumed((missed) => emit({ event: "resumed", missed }));

try {
  await client.start();
  // The transport the official client ended up on (its own object, not part of its typings).
  emit({ event: "started", transport: client.hub.connection?.transport?.constructor?.name ?? null });
} catch (error) {
  emit({ event: "start_failed", error: String(error) });
  process.exit(0);
}

const lines = createInterface({ input: process.stdin });
lines.on("line", async (line) => {
  const command = JSON.parse(line);
  if (command.report) emit({ event: "requests", paths: [...new Set(paths)].sort() });
  if (command.watch) emit({ event: "watched", states: await client.watchPresence(command.watch) });
});
lines.on("close", async () => {
  await client.stop();
  process.exit(0);
});
