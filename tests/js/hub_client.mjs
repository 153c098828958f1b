// Drives the official @microsoft/signalr client against the hub for the e2e tests.
// Usage: node hub_client.mjs '{"url": "...", "token": "...", "stateful": true, "targets": ["x"],
//   "transport": "WebSockets|ServerSentEvents|LongPolling", "protocol": "json|messagepack",
//   "reconnect": true}'
// Prints one JSON object per line on stdout; exits when stdin closes (after stopping cleanly).
import * as signalR from "@microsoft/signalr";
import { MessagePackHubProtocol } from "@microsoft/signalr-protocol-msgpack";
import { createInterface } from "node:readline";

const config = JSON.parse(process.argv[2]);
const emit = (event) => process.stdout.write(JSON.stringify(event) + "\n");

const stderrLogger = {
  log(level, message) {
    if (level >= signalR.LogLevel.Warning) process.stderr.write(`[signalr ${level}] ${message}\n`);
  },
};

let token = config.token;
let builder = new signalR.HubConnectionBuilder()
  .withUrl(config.url, {
    accessTokenFactory: () => token,
    transport: signalR.HttpTransportType[config.transport ?? "WebSockets"],
  })
  .configureLogging(stderrLogger);
if (config.stateful) builder = builder.withStatefulReconnect();
if (config.protocol === "messagepack") builder = builder.withHubProtocol(new MessagePackHubProtocol());
if (config.reconnect) builder = builder.withAutomaticReconnect([0, 200, 500, 1000, 2000]);
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
