// Drives the official @microsoft/signalr client against the hub for the e2e tests.
// Usage: node hub_client.mjs '{"url": "...", "token": "...", "stateful": true, "targets": ["x"],
//   "transport": "WebSockets|ServerSentEvents|LongPolling", "protocol": "json|messagepack",
//   "reconnect": true | [delays]}'
// With "mint": {"secret", "user", "ttls": [s, ...]} instead of "token", the token factory signs a
// fresh HS256 token once the last one expired (as an app's refresh would; the n-th lives ttls[n]
// seconds, the last entry repeating). "reconnect" turns on automatic reconnect (true: default
// delays). A {"token": ...} line on stdin replaces the token. Prints one JSON object per line on
// stdout; exits when stdin closes (after stopping cleanly).
import * as signalR from "@microsoft/signalr";
import { MessagePackHubProtocol } from "@microsoft/signalr-protocol-msgpack";
import { createHmac } from "node:crypto";
import { createInterface } from "node:readline";

const config = JSON.parse(process.argv[2]);
const emit = (event) => process.stdout.write(JSON.stringify(event) + "\n");

const stderrLogger = {
  log(level, message) {
    if (level >= signalR.LogLevel.Warning) process.stderr.write(`[signalr ${level}] ${message}\n`);
  },
};

const base64url = (value) => Buffer.from(value).toString("base64url");

let minted = 0;

function mint({ secret, user, ttls }) {
  const ttl = ttls[Math.min(minted++, ttls.length - 1)];
  const now = Math.floor(Date.now() / 1000);
  const header = base64url(JSON.stringify({ alg: "HS256", typ: "JWT" }));
  const claims = base64url(JSON.stringify({ sub: user, iat: now, exp: now + ttl }));
  const signature = createHmac("sha256", secret).update(`${header}.${claims}`).digest("base64url");
  return `${header}.${claims}.${signature}`;
}

// Like an app's token cache: the same token until it expires, then a fresh one.
let current = null;
let token = config.token;

function accessTokenFactory() {
  if (!config.mint) return token;
  if (current === null || current.exp <= Date.now() / 1000) {
    const fresh = mint(config.mint);
    current = { token: fresh, exp: JSON.parse(Buffer.from(fresh.split(".")[1], "base64url")).exp };
    emit({ event: "token", exp: current.exp });
  }
  return current.token;
}

let builder = new signalR.HubConnectionBuilder()
  .withUrl(config.url, {
    accessTokenFactory,
    transport: signalR.HttpTransportType[config.transport ?? "WebSockets"],
  })
  .configureLogging(stderrLogger);
if (config.stateful) builder = builder.withStatefulReconnect();
if (config.protocol === "messagepack") builder = builder.withHubProtocol(new MessagePackHubProtocol());
if (Array.isArray(config.reconnect)) builder = builder.withAutomaticReconnect(config.reconnect);
else if (config.reconnect) builder = builder.withAutomaticReconnect([0, 200, 500, 1000, 2000]);
const connection = builder.build();

for (const target of config.targets ?? []) {
  connection.on(target, (...args) => emit({ event: "message", target, args }));
}
connection.onreconnecting((error) => emit({ event: "reconnecting", error: String(error) }));
connection.onreconnected((connectionId) => emit({ event: "reconnected", connectionId }));
connection.onclose((error) => emit({ event: "closed", error: error ? String(error) : null }));

try {
  await connection.start();
  emit({ event: "started", connectionId: connection.connectionId });
} catch (error) {
  emit({ event: "start_failed", error: String(error), statusCode: error.statusCode ?? null });
  process.exit(0);
}

const lines = createInterface({ input: process.stdin });
lines.on("line", async (line) => {
  const command = JSON.parse(line);
  if (command.token) token = command.token;
  if (command.invoke) {
    try {
      const result = await connection.invoke(command.invoke, ...(command.args ?? []));
      emit({ event: "invoked", result });
    } catch (error) {
      emit({ event: "invoke_failed", error: String(error) });
    }
  }
});
lines.on("close", async () => {
  await connection.stop();
  emit({ event: "stopped" });
  process.exit(0);
});
