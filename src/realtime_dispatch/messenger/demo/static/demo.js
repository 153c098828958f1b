// The demo page, on the TypeScript SDK (clients/js, bundled into messenger-client.js): the
// official SignalR client underneath, per-chat timelines deduplicated by eventId and (chatId,
// seq), gaps resynced over REST, reconnects resumed from the sync cursor. The page only renders
// and misbehaves on request.
import { EVENT_NAMES, MessengerClient } from "/demo/static/messenger-client.js";

const EDIT_WINDOW_MS = 60_000;
const $ = (id) => document.getElementById(id);

// Every WebSocket the hub connection opens, so that "cut" can drop the live one; while a cut
// lasts, new ones fail at once (the line is down), so what is sent meanwhile is missed live.
const sockets = new Set();
const CUT_MS = 3000;
let cutUntil = 0;
class TrackedWebSocket extends WebSocket {
  constructor(...args) {
    if (Date.now() < cutUntil) throw new Error("the line is cut (simulated)");
    super(...args);
    sockets.add(this);
    this.addEventListener("close", () => sockets.delete(this));
  }
}

// --- state -----------------------------------------------------------------------------------

const state = {
  users: [], me: null, token: null, client: null,
  chats: new Map(), current: null, gaps: new Set(), reconnected: false,
  counts: { events: 0, dupes: 0, refetch: 0 },
  loseNext: false, lastPush: null, readSent: new Map(), shown: new Set(),
  presence: new Map(), typing: new Map(), typingSent: 0, askedAgain: new Set(),
};

const userById = (id) => state.users.find((u) => u.userId === id);
const nameOf = (id) => (id === state.me?.userId ? "you" : userById(id)?.name ?? id.slice(0, 8));

async function api(method, path, body) {
  const response = await fetch(path, {
    method,
    headers: { Authorization: `Bearer ${state.token}`, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!response.ok) {
    let detail = {};
    try { detail = await response.json(); } catch { /* no body */ }
    throw new Error(detail.message || `${response.status} ${response.statusText}`);
  }
  return response.status === 204 ? null : response.json();
}

function chatOf(chatId) {
  let chat = state.chats.get(chatId);
  if (!chat) {
    chat = { chatId, title: "…", participants: [], unread: 0 };
    Object.defineProperty(chat, "timeline", { get: () => state.client.timeline(chatId) });
    state.chats.set(chatId, chat);
  }
  return chat;
}

// --- the log on the right --------------------------------------------------------------------

function log(kind, text) {
  const item = document.createElement("li");
  item.className = `log-${kind}`;
  const time = new Date().toLocaleTimeString([], { hour12: false });
  item.innerHTML = `<time>${time}</time><span class="tag">${kind}</span>`;
  item.append(document.createTextNode(text));
  $("log").prepend(item);
  while ($("log").children.length > 80) $("log").lastChild.remove();
}

function bump(counter) {
  state.counts[counter] += 1;
  const el = $(`count-${counter}`);
  el.textContent = state.counts[counter];
  el.parentElement.classList.remove("flash");
  void el.parentElement.offsetWidth;
  el.parentElement.classList.add("flash");
}

function toast(text) {
  const el = $("toast");
  el.textContent = text;
  el.classList.remove("hidden");
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => el.classList.add("hidden"), 3500);
}

// --- what the SDK reports ------------------------------------------------------------------

function onResync(chatId, recovered) {
  const chat = chatOf(chatId);
  bump("refetch");
  const where = `“${chat.title}”, up to seq ${chat.timeline.contiguousSeq}`;
  const added = recovered.length;
  if (state.gaps.delete(chatId)) log("refetch", `gap filled over REST: ${added} missed message(s) in ${where}`);
  else if (state.reconnected) log("refetch", `resynced after reconnect: ${added} new in ${where}`);
  else log("refetch", `history loaded over REST: ${added} message(s) in ${where}`);
  if (chatId !== state.current) chat.unread += added;
  render();
}

function onDuplicate(chatId, seq) {
  bump("dupes");
  log("duplicate", `duplicate push dropped: seq ${seq} of “${chatOf(chatId).title}” is already here`);
  render();
}

// Every push the SDK lets through, before it applies it: the "lose next push" fault and the
// event log live here.
function inspect(target, payload) {
  if (state.loseNext && target === "message_received" && !state.replaying) {
    state.loseNext = false;
    $("fault-drop").classList.remove("armed");
    log("lost", `push of seq ${payload.seq} lost on the way (simulated)`);
    return false;
  }
  if (!state.replaying) state.lastPush = { target, payload };
  bump("events");
  if (payload.chatId && !state.chats.has(payload.chatId)) loadChats();
  return true;
}

function onEvent(target, payload) {
  const chat = payload.chatId ? chatOf(payload.chatId) : null;
  switch (target) {
    case "message_received":
      log("event", `${target}: message seq ${payload.seq}`);
      tookPart(payload.senderUserId);
      if (payload.chatId !== state.current) chat.unread += 1;
      break;
    case "message_edited":
    case "message_deleted":
      log("event", `${target}: seq ${payload.seq}`);
      break;
    case "read_receipt_updated": {
      const person = chat.participants.find((p) => p.userId === payload.userId);
      if (person) person.lastReadSeq = Math.max(person.lastReadSeq ?? 0, payload.lastReadSeq);
      else chat.participants.push({ userId: payload.userId, active: true, lastReadSeq: payload.lastReadSeq });
      log("event", `${target}: ${nameOf(payload.userId)} read up to seq ${payload.lastReadSeq}`);
      tookPart(payload.userId);
      break;
    }
    case "chat_updated":
      log("event", `${target}: ${payload.eventKind}`);
      loadChats();
      break;
    default:
      log("event", target);
  }
  if (chat && chat.timeline.hasGap && !state.gaps.has(chat.chatId)) {
    state.gaps.add(chat.chatId);
    log("gap", `gap: have up to seq ${chat.timeline.contiguousSeq}, heard of ${chat.timeline.highestSeq}`);
  }
  render();
}

async function loadChats() {
  const data = await api("GET", "/demo/api/chats");
  for (const item of data.items) {
    const chat = chatOf(item.chatId);
    chat.title = item.title;
    chat.participants = item.participants;
    if (chat.timeline.contiguousSeq < item.lastSeq) state.client.resync(item.chatId).catch((e) => log("error", e.message));
  }
  if (!state.current && data.items.length) state.current = data.items[0].chatId;
  render();
  // Who shares a chat changes with the chats; watches end with a connection: so, every time.
  await watchPresence();
}

// --- rendering -------------------------------------------------------------------------------

function avatar(user, small = false) {
  const el = document.createElement("span");
  el.className = small ? "avatar small" : "avatar";
  el.style.background = user?.color ?? "#999";
  el.textContent = (user?.name ?? "?")[0];
  const online = user && user.userId !== state.me?.userId ? state.presence.get(user.userId) : undefined;
  if (online !== undefined) {
    const dot = document.createElement("span");
    dot.className = online ? "dot on" : "dot";
    dot.title = online ? "online" : "offline";
    el.append(dot);
  }
  return el;
}

// --- live signals: presence dots and "… is typing" ----------------------------------------------

async function watchPresence() {
  const others = state.users.filter((u) => u.userId !== state.me.userId).map((u) => u.userId);
  try {
    for (const entry of await state.client.watchPresence(others)) state.presence.set(entry.userId, entry.online);
    render();
  } catch (error) { log("error", `presence: ${error.message}`); }
}

// A user's presence shows only through a chat they took part in (created, read in, sent to):
// one the hub withheld shows once they read or send here, so ask again then (once per user).
function tookPart(userId) {
  if (!userId || userId === state.me?.userId || state.presence.has(userId)) return;
  if (state.askedAgain.has(userId)) return;
  state.askedAgain.add(userId);
  watchPresence();
}

function onPresence(entry) {
  state.presence.set(entry.userId, entry.online);
  log("presence", `${nameOf(entry.userId)} is ${entry.online ? "online" : "offline"}`);
  render();
}

function onTyping(entry) {
  const typists = state.typing.get(entry.chatId) ?? new Map();
  typists.set(entry.userId, Date.parse(entry.expiresAt));
  state.typing.set(entry.chatId, typists);
  renderTyping();
}

function renderTyping() {
  const now = Date.now();
  const typists = state.typing.get(state.current) ?? new Map();
  const names = [...typists].filter(([, until]) => until > now).map(([userId]) => userById(userId)?.name ?? "someone");
  $("typing").textContent = names.length ? `${names.join(", ")} ${names.length > 1 ? "are" : "is"} typing…` : "";
}

function typed() {
  // The hub keeps one user_typing per (user, chat) per interval anyway; this spares the wire.
  if (!state.current || Date.now() - state.typingSent < 1000) return;
  state.typingSent = Date.now();
  state.client.typing(state.current).catch((error) => log("error", `typing: ${error.message}`));
}

function render() {
  renderChats();
  renderConversation();
  renderTyping();
  markRead();
}

function renderChats() {
  const list = $("chat-list");
  list.replaceChildren();
  $("no-chats").classList.toggle("hidden", state.chats.size > 0);
  for (const chat of state.chats.values()) {
    const item = document.createElement("li");
    item.dataset.chat = chat.chatId;
    item.classList.toggle("active", chat.chatId === state.current);
    if (chat.chatId === state.current) chat.unread = 0;
    const others = chat.participants.filter((p) => p.userId !== state.me.userId);
    const faces = document.createElement("span");
    faces.className = "faces";
    for (const p of others.slice(0, 3)) faces.append(avatar(userById(p.userId), true));
    const title = document.createElement("span");
    title.className = "title";
    title.textContent = chat.title;
    const last = chat.timeline.messages().at(-1);
    const preview = document.createElement("span");
    preview.className = "preview";
    preview.textContent = last ? (last.deletedAt ? "message deleted" : `${nameOf(last.senderUserId)}: ${contentText(last)}`) : "no messages yet";
    item.append(faces, title, preview);
    if (chat.unread) {
      const badge = document.createElement("span");
      badge.className = "badge";
      badge.textContent = chat.unread;
      item.append(badge);
    }
    item.onclick = () => { state.current = chat.chatId; chat.unread = 0; render(); $("body").focus(); };
    list.append(item);
  }
}

function sizeText(bytes) {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KB`;
  return `${(bytes / 1024 / 1024).toFixed(1)} MB`;
}

// What a message shows: its text, a file's name and size, or a card's text.
function contentText(m) {
  if (m.kind === "File" && m.fileMeta) {
    const caption = m.body ? ` — ${m.body}` : "";
    return `📎 ${m.fileMeta.name} (${sizeText(m.fileMeta.size)})${caption}`;
  }
  if (m.kind === "Card") return m.cardText ?? "";
  return m.body ?? "";
}

function receiptText(chat, message) {
  const readers = chat.participants.filter((p) => p.userId !== state.me.userId && p.lastReadSeq >= message.seq);
  if (readers.length) return `✓✓ read by ${readers.map((p) => nameOf(p.userId)).join(", ")}`;
  return "✓ delivered";
}

function renderConversation() {
  const chat = state.chats.get(state.current);
  $("body").disabled = $("send").disabled = $("attach").disabled = !chat;
  const list = $("messages");
  if (!chat) { list.replaceChildren(); return; }
  $("conv-title").textContent = chat.title;
  $("conv-people").textContent = chat.participants.map((p) => nameOf(p.userId)).join(" · ");
  const stick = list.scrollHeight - list.scrollTop - list.clientHeight < 40;
  list.replaceChildren();
  const now = Date.now();
  for (const m of chat.timeline.messages()) {
    const mine = m.senderUserId === state.me.userId;
    const item = document.createElement("li");
    item.className = mine ? "msg mine" : "msg";
    item.dataset.seq = m.seq;
    const key = `${chat.chatId}:${m.seq}`;
    if (!state.shown.has(key)) { state.shown.add(key); item.classList.add("fresh"); }
    const sender = userById(m.senderUserId);
    const bubble = document.createElement("div");
    bubble.className = "bubble";
    const meta = document.createElement("div");
    meta.className = "meta";
    meta.textContent = `${mine ? "You" : sender?.name ?? "someone"} · #${m.seq} · ${new Date(m.sentAt).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })}`;
    const body = document.createElement("div");
    body.className = m.deletedAt ? "body deleted" : `body kind-${(m.kind ?? "Text").toLowerCase()}`;
    body.textContent = m.deletedAt ? "message deleted" : contentText(m);
    bubble.append(meta, body);
    if (m.editedAt && !m.deletedAt) {
      const tag = document.createElement("span");
      tag.className = "edited";
      tag.textContent = "edited";
      meta.append(" · ", tag);
    }
    if (mine && !m.deletedAt) {
      const footer = document.createElement("div");
      footer.className = "footer";
      const receipt = document.createElement("span");
      receipt.className = "receipt";
      receipt.textContent = receiptText(chat, m);
      footer.append(receipt);
      const left = EDIT_WINDOW_MS - (now - Date.parse(m.sentAt));
      if (left > 0) {
        const edit = document.createElement("button");
        edit.className = "edit";
        edit.dataset.sent = Date.parse(m.sentAt);
        edit.textContent = `edit · ${Math.ceil(left / 1000)}s`;
        edit.onclick = () => editMessage(chat, m);
        const remove = document.createElement("button");
        remove.className = "delete";
        remove.textContent = "delete";
        remove.onclick = () => deleteMessage(chat, m);
        footer.append(edit, remove);
      }
      bubble.append(footer);
    }
    if (!mine) item.append(avatar(sender, true));
    item.append(bubble);
    list.append(item);
  }
  if (stick) list.scrollTop = list.scrollHeight;
}

// Count the edit window down in place; rebuild only when a window closes.
function tick() {
  for (const button of document.querySelectorAll("#messages button.edit")) {
    const left = EDIT_WINDOW_MS - (Date.now() - Number(button.dataset.sent));
    if (left <= 0) { renderConversation(); return; }
    button.textContent = `edit · ${Math.ceil(left / 1000)}s`;
  }
}

// --- commands --------------------------------------------------------------------------------

async function markRead() {
  const chat = state.chats.get(state.current);
  if (!chat || document.hidden) return;
  const seq = chat.timeline.contiguousSeq;
  const me = chat.participants.find((p) => p.userId === state.me.userId);
  if (!seq || (me && me.lastReadSeq >= seq) || (state.readSent.get(chat.chatId) ?? 0) >= seq) return;
  state.readSent.set(chat.chatId, seq);
  try { await state.client.rest.markRead(chat.chatId, seq); } catch (error) { toast(error.message); }
}

async function editMessage(chat, message) {
  const text = prompt("Edit your message", message.body);
  if (text === null || !text.trim() || text === message.body) return;
  try { await state.client.rest.editMessage(chat.chatId, message.messageId, text); } catch (error) { toast(error.message); }
}

async function deleteMessage(chat, message) {
  try { await state.client.rest.deleteMessage(chat.chatId, message.messageId); } catch (error) { toast(error.message); }
}

async function send(event) {
  event.preventDefault();
  const text = $("body").value.trim();
  if (!text || !state.current) return;
  $("body").value = "";
  try { await state.client.send(state.current, text); } catch (error) { toast(error.message); $("body").value = text; }
}

// A file message: name, size and type only (this demo has no upload service).
async function sendFile() {
  const file = $("file").files[0];
  $("file").value = "";
  if (!file || !state.current) return;
  const fileMeta = {
    fileId: crypto.randomUUID(), name: file.name, size: file.size, contentType: file.type || "application/octet-stream",
  };
  try { await state.client.send(state.current, null, { kind: "File", fileMeta }); } catch (error) { toast(error.message); }
}

async function createChat(event) {
  event.preventDefault();
  const members = [...document.querySelectorAll("#chat-members input:checked")].map((i) => i.value);
  if (!members.length) { toast("Pick at least one person to chat with"); return; }
  try {
    const created = await state.client.rest.createChat($("chat-title").value, members);
    state.current = created.chatId;
    $("new-chat-form").classList.add("hidden");
    $("chat-title").value = "";
    log("event", "chat created; its members joined chat:" + created.chatId.slice(0, 8) + "… live");
    await loadChats();
  } catch (error) { toast(error.message); }
}

// --- sign-in ---------------------------------------------------------------------------------

async function pick(user) {
  try {
    const response = await fetch("/demo/api/token", {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ user: user.key }),
    });
    if (!response.ok) throw new Error("this server does not mint demo tokens");
    const minted = await response.json();
    start(minted, minted.token);
  } catch (error) { $("pick-note").textContent = error.message; }
}

function userFromToken(token) {
  const claims = JSON.parse(atob(token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/")));
  return userById(claims.sub) ?? { key: "custom", name: claims.sub.slice(0, 8), userId: claims.sub, color: "#555" };
}

function start(user, token) {
  state.me = user;
  state.token = token;
  sessionStorage.setItem("demo-session", JSON.stringify({ user, token }));
  $("pick").classList.add("hidden");
  $("app").classList.remove("hidden");
  $("me").classList.remove("hidden");
  $("me-avatar").replaceWith(Object.assign(avatar(user), { id: "me-avatar" }));
  $("me-name").textContent = user.name;
  document.title = `${user.name} · realtime-dispatch demo`;
  const members = $("chat-members");
  members.replaceChildren();
  for (const other of state.users.filter((u) => u.userId !== user.userId)) {
    const label = document.createElement("label");
    label.dataset.user = other.key;
    const box = Object.assign(document.createElement("input"), { type: "checkbox", value: other.userId });
    label.append(box, avatar(other, true), other.name);
    members.append(label);
  }
  const client = new MessengerClient(location.origin, {
    token: () => state.token,
    inspect,
    webSocket: TrackedWebSocket,
  });
  state.client = client;
  client.onDuplicate(onDuplicate);
  client.onResync(onResync);
  client.onResumed((missed) => {
    log("resume", `resumed: ${missed} missed event${missed === 1 ? "" : "s"} from the sync cursor`);
    toast(`resumed: ${missed} missed event${missed === 1 ? "" : "s"}`);
  });
  client.onConnection((up, reconnect) => {
    setConnection(up);
    if (up) {
      state.reconnected = reconnect;
      log("connect", reconnect ? "reconnected: resuming from the sync cursor" : "connected to /hubs/messenger");
      loadChats().catch((error) => log("error", error.message));
    } else if (reconnect) {
      log("disconnect", "connection lost: reconnecting…");
    }
  });
  for (const name of EVENT_NAMES) client.on(name, (payload) => onEvent(name, payload));
  client.on("presence_changed", onPresence);
  client.on("user_typing", onTyping);
  client.start().catch((error) => log("error", `hub refused: ${error.message}`));
}

function setConnection(up) {
  $("conn").textContent = up ? "live" : "reconnecting…";
  $("conn").className = up ? "pill pill-on" : "pill pill-off";
}

async function boot() {
  const data = await (await fetch("/demo/api/users")).json();
  state.users = data.users;
  const cast = $("cast");
  for (const user of state.users) {
    const button = document.createElement("button");
    button.type = "button";
    button.dataset.user = user.key;
    button.append(avatar(user), Object.assign(document.createElement("span"), { textContent: user.name }));
    button.onclick = () => pick(user);
    button.disabled = !data.devTokens;
    cast.append(button);
  }
  if (!data.devTokens) {
    $("pick-note").textContent = "This server runs with configured secrets, so it mints no demo tokens. Paste a token instead.";
  }
  $("token-form").onsubmit = (event) => {
    event.preventDefault();
    const token = $("token-input").value.trim();
    try { start(userFromToken(token), token); } catch { $("pick-note").textContent = "That does not look like a JWT."; }
  };
  $("composer").onsubmit = send;
  $("new-chat").onclick = () => $("new-chat-form").classList.toggle("hidden");
  $("new-chat-form").onsubmit = createChat;
  $("logout").onclick = () => { sessionStorage.removeItem("demo-session"); location.reload(); };
  $("fault-replay").onclick = () => {
    if (!state.lastPush) { toast("Nothing pushed yet"); return; }
    log("replay", `delivering ${state.lastPush.target} again (simulated)`);
    state.replaying = true;
    try { state.client.receive(state.lastPush.target, state.lastPush.payload); } finally { state.replaying = false; }
  };
  $("fault-drop").onclick = () => {
    state.loseNext = true;
    $("fault-drop").classList.add("armed");
    log("lost", "the next message push will be lost (simulated)");
  };
  $("fault-cut").onclick = () => {
    log("disconnect", `cutting the WebSocket for ${CUT_MS / 1000} s (simulated)`);
    cutUntil = Date.now() + CUT_MS;
    for (const socket of sockets) socket.close(4000, "cut");
  };
  $("attach").onclick = () => $("file").click();
  $("file").onchange = sendFile;
  document.addEventListener("visibilitychange", markRead);
  setInterval(tick, 1000);
  setInterval(renderTyping, 500);
  $("body").addEventListener("input", typed);
  const saved = sessionStorage.getItem("demo-session");
  if (saved) { const { user, token } = JSON.parse(saved); start(user, token); }
}

boot();
