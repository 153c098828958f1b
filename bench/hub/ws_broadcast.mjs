// Peer for bench/hub/peers.py: a Node.js `ws` broadcast server. It answers every client's hub
// handshake with "{}\x1e", and on each stdin line {"pushes": n} sends n invocation records (the
// same JSON hub record bytes as the hub), 8 pushes per event-loop turn, to every client that
// connected with ?member=1. Prints {"event": "listening"} once the port is open.
import { createInterface } from "node:readline";
import WebSocket from "ws";

const port = Number(process.argv[2]);
const chat = process.argv[3];
const members = [];
const server = new WebSocket.Server({ port, host: "127.0.0.1", perMessageDeflate: false });
server.on("connection", (socket, request) => {
  const member = request.url.includes("member=1");
  socket.once("message", () => {
    socket.send("{}\x1e");
    if (member) members.push(socket);
  });
  socket.on("close", () => {
    const at = members.indexOf(socket);
    if (at >= 0) members.splice(at, 1);
  });
});
server.on("listening", () => console.log(JSON.stringify({ event: "listening" })));

function send(from, to) {
  for (let n = from; n < to; n++) {
    const record = Buffer.from(
      JSON.stringify({
        type: 1,
        target: "message_received",
        arguments: [{ chatId: chat, seq: n }],
      }) + "\x1e",
    );
    for (const socket of members) socket.send(record, { binary: false });
  }
}

createInterface({ input: process.stdin }).on("line", (line) => {
  const { pushes } = JSON.parse(line);
  let next = 0;
  const turn = () => {
    const end = Math.min(next + 8, pushes);
    send(next, end);
    next = end;
    if (next < pushes) setImmediate(turn);
  };
  turn();
});
