// The demo page: a small client of the SignalR JSON hub protocol over a WebSocket, per-chat
// timelines deduplicated by (chatId, seq) and resynced over REST on gaps and reconnects.
const RS = "\x1e";
const EDIT_WINDOW_MS = 60_000;
const PAGE = 200;
const $ = (id) => document.getElementById(id);

// --- hub connection --------------------------------------------------------------------------

class HubClient {
  constructor(token, handlers) {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    this.url = `${scheme}://${location.host}/hubs/messenger?access_token=${encodeURIComponent(token)}`;
    this.handlers = handlers;
    this.attempt = 0;
    this.connects = 0;
    this.stopped = false;
  }

  start() { this.connect(); }

  stop() { this.stopped = true; this.ws?.close(); }

  cut() { this.ws?.close(4000, "cut"); }

  connect() {
    const ws = new WebSocket(this.url);
    this.ws = ws;
    let buffer = "";
    let open = false;
    let ping = null;
    ws.onopen = () => ws.send(JSON.stringify({ protocol: "json", version: 1 }) + RS);
    ws.onmessage = (event) => {
      const records = (buffer + event.data).split(RS);
      buffer = records.pop();
      for (const record of records) {
        if (!record) continue;
        const message = JSON.parse(record);
        if (!open) {
          if (message.error) { this.handlers.onRefused(message.error); ws.close(); return; }
          open = true;
          this.attempt = 0;
          ping = setInterval(() => ws.send('{"type":6}' + RS), 15_000);
          this.handlers.onConnected(this.connects++ > 0);
        } else if (message.type === 1) {
          this.handlers.onEvent(message.target, message.arguments[0]);
        } else if (message.type === 7) {
          ws.close();
        }
      }
    };
    ws.onclose = () => {
      clearInterval(ping);
      if (open) this.handlers.onDisconnected();
      if (this.stopped) return;
      this.attempt += 1;
      const delay = Math.min(5000, 250 * 2 ** (this.attempt - 1)) * (1 - Math.random() * 0.5);
      setTimeout(() => this.connect(), delay);
    };
  }
}

// --- timeline (dedupe, seq order, gaps) ------------------------------------------------------

class Timeline {
  constructor() { this.bySeq = new Map(); this.seqOf = new Map(); this.contiguous = 0; this.highest = 0; }

  get hasGap() { return this.highest > this.contiguous; }

  messages() { return [...this.bySeq.values()].sort((a, b) => a.seq - b.seq); }

  // "added" | "duplicate" | "updated"
  add(m) {
    const seq = this.seqOf.get(m.messageId) ?? m.seq;
    const current = this.bySeq.get(seq);
    if (current) {
      const merged = merge(current, m);
      if (same(merged, current)) return "duplicate";
      this.bySeq.set(seq, merged);
      return "updated";
    }
    this.bySeq.set(m.seq, m);
    this.seqOf.set(m.messageId, m.seq);
    this.highest = Math.max(this.highest, m.seq);
    while (this.bySeq.has(this.contiguous + 1)) this.contiguous += 1;
    return "added";
  }

  // An edit or deletion: "updated" | "duplicate" | "unknown" (the message is not here: a gap)
  change(messageId, seq, fields) {
    const seqHere = this.seqOf.get(messageId);
    if (seqHere === undefined) { this.highest = Math.max(this.highest, seq); return "unknown"; }
    const current = this.bySeq.get(seqHere);
    const merged = merge(current, { ...current, ...fields });
    if (same(merged, current)) return "duplicate";
    this.bySeq.set(seqHere, merged);
    return "updated";
  }
}

function merge(current, incoming) {
  const deletedAt = current.deletedAt || incoming.deletedAt || null;
  if (deletedAt) return { ...current, body: null, deletedAt };
  const keep = current.editedAt && (!incoming.editedAt || incoming.editedAt < current.editedAt);
  const newer = keep ? current : incoming;
  return { ...current, body: newer.body ?? null, editedAt: newer.editedAt ?? null };
}

const same = (a, b) => a.body === b.body && a.editedAt === b.editedAt && a.deletedAt === b.deletedAt;

// --- state -----------------------------------------------------------------------------------

const state = {
  users: [], me: null, token: null, hub: null,
  chats: new Map(), current: null, syncing: new Map(),
  counts: { events: 0, dupes: 0, refetch: 0 },
  loseNext: false, lastPush: null, readSent: new Map(), shown: new Set(),
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
    chat = { chatId, title: "…", participants: [], timeline: new Timeline(), unread: 0 };
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

// --- REST resync -----------------------------------------------------------------------------

// One fetch per chat at a time; requests meanwhile are folded into one more round.
function resync(chatId, reason, overlap = 0) {
  const running = state.syncing.get(chatId);
  if (running) { running.again = { reason, overlap: Math.max(overlap, running.again?.overlap ?? 0) }; return; }
  const job = { again: null };
  state.syncing.set(chatId, job);
  (async () => {
    let next = { reason, overlap };
    try {
      while (next) {
        await fetchHistory(chatId, next.reason, next.overlap);
        next = job.again;
        job.again = null;
      }
    } catch (error) {
      log("error", `history refetch failed (${error.message}); it runs again on reconnect`);
    } finally {
      state.syncing.delete(chatId);
    }
  })();
}

async function fetchHistory(chatId, reason, overlap) {
  const chat = chatOf(chatId);
  const timeline = chat.timeline;
  const from = Math.max(0, timeline.contiguous - overlap);
  let after = from;
  let added = 0;
  for (;;) {
    const page = await api("GET", `/api/chats/${chatId}/messages?afterSeq=${after}&limit=${PAGE}`);
    for (const item of page.items) if (timeline.add({ ...item, chatId }) === "added") added += 1;
    if (page.items.length < PAGE) break;
    after = page.items[page.items.length - 1].seq;
  }
  bump("refetch");
  const where = `“${chat.title}”, afterSeq=${from}`;
  if (reason === "gap") log("refetch", `gap filled over REST: ${added} missed message(s) in ${where}`);
  else if (reason === "reconnect") log("refetch", `resynced after reconnect: ${added} new in ${where}`);
  else log("refetch", `history loaded over REST: ${added} message(s) in ${where}`);
  if (chatId !== state.current) chat.unread += added;
  render();
}

// --- hub events ------------------------------------------------------------------------------

function onEvent(target, payload, replayed = false) {
  if (state.loseNext && target === "message_received" && !replayed) {
    state.loseNext = false;
    $("fault-drop").classList.remove("armed");
    log("lost", `push of seq ${payload.seq} lost on the way (simulated)`);
    return;
  }
  if (!replayed) state.lastPush = { target, payload };
  bump("events");
  const known = state.chats.has(payload.chatId);
  if (payload.chatId && !known) loadChats();
  switch (target) {
    case "message_received": {
      const chat = chatOf(payload.chatId);
      const result = chat.timeline.add({
        messageId: payload.messageId, seq: payload.seq, senderUserId: payload.senderUserId ?? null,
        body: payload.body ?? null, sentAt: payload.sentAt, editedAt: null, deletedAt: null,
      });
      afterChange(chat, result, `message seq ${payload.seq}`, target);
      if (result === "added" && payload.chatId !== state.current) chat.unread += 1;
      break;
    }
    case "message_edited":
    case "message_deleted": {
      const chat = chatOf(payload.chatId);
      const fields = target === "message_edited"
        ? { body: payload.body ?? null, editedAt: payload.editedAt }
        : { deletedAt: payload.deletedAt };
      const result = chat.timeline.change(payload.messageId, payload.seq, fields);
      afterChange(chat, result, `${target === "message_edited" ? "edit" : "deletion"} of seq ${payload.seq}`, target);
      break;
    }
    case "read_receipt_updated": {
      const chat = chatOf(payload.chatId);
      const person = chat.participants.find((p) => p.userId === payload.userId);
      if (person && person.lastReadSeq >= payload.lastReadSeq) {
        bump("dupes");
        log("duplicate", `read receipt dropped: ${nameOf(payload.userId)} already read up to ${person.lastReadSeq}`);
      } else {
        if (person) person.lastReadSeq = payload.lastReadSeq;
        else chat.participants.push({ userId: payload.userId, active: true, lastReadSeq: payload.lastReadSeq });
        log("event", `${target}: ${nameOf(payload.userId)} read up to seq ${payload.lastReadSeq}`);
      }
      break;
    }
    case "chat_updated":
      log("event", `${target}: ${payload.eventKind}`);
      loadChats();
      break;
    default:
      log("event", target);
  }
  render();
}

function afterChange(chat, result, what, target) {
  if (result === "duplicate") {
    bump("dupes");
    log("duplicate", `duplicate push dropped: ${what} of “${chat.title}” is already here`);
  } else {
    log("event", `${target}: ${what}${result === "unknown" ? " (message not here yet)" : ""}`);
  }
  if (chat.timeline.hasGap) {
    log("gap", `gap: have up to seq ${chat.timeline.contiguous}, heard of ${chat.timeline.highest}`);
    resync(chat.chatId, "gap");
  }
}

async function loadChats() {
  const data = await api("GET", "/demo/api/chats");
  for (const item of data.items) {
    const chat = chatOf(item.chatId);
    chat.title = item.title;
    chat.participants = item.participants;
    if (chat.timeline.contiguous < item.lastSeq && !state.syncing.has(item.chatId)) resync(item.chatId, "load");
  }
  if (!state.current && data.items.length) state.current = data.items[0].chatId;
  render();
}

// --- rendering -------------------------------------------------------------------------------

function avatar(user, small = false) {
  const el = document.createElement("span");
  el.className = small ? "avatar small" : "avatar";
  el.style.background = user?.color ?? "#999";
  el.textContent = (user?.name ?? "?")[0];
  return el;
}

function render() {
  renderChats();
  renderConversation();
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
    preview.textContent = last ? (last.deletedAt ? "message deleted" : `${nameOf(last.senderUserId)}: ${last.body}`) : "no messages yet";
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

function receiptText(chat, message) {
  const readers = chat.participants.filter((p) => p.userId !== state.me.userId && p.lastReadSeq >= message.seq);
  if (readers.length) return `✓✓ read by ${readers.map((p) => nameOf(p.userId)).join(", ")}`;
  return "✓ delivered";
}

function renderConversation() {
  const chat = state.chats.get(state.current);
  $("body").disabled = $("send").disabled = !chat;
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
    body.className = m.deletedAt ? "body deleted" : "body";
    body.textContent = m.deletedAt ? "message deleted" : m.body;
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
  const seq = chat.timeline.contiguous;
  const me = chat.participants.find((p) => p.userId === state.me.userId);
  if (!seq || (me && me.lastReadSeq >= seq) || (state.readSent.get(chat.chatId) ?? 0) >= seq) return;
  state.readSent.set(chat.chatId, seq);
  try { await api("POST", `/api/chats/${chat.chatId}/read`, { seq }); } catch (error) { toast(error.message); }
}

async function editMessage(chat, message) {
  const text = prompt("Edit your message", message.body);
  if (text === null || !text.trim() || text === message.body) return;
  try { await api("PATCH", `/api/chats/${chat.chatId}/messages/${message.messageId}`, { body: text }); } catch (error) { toast(error.message); }
}

async function deleteMessage(chat, message) {
  try { await api("DELETE", `/api/chats/${chat.chatId}/messages/${message.messageId}`); } catch (error) { toast(error.message); }
}

async function send(event) {
  event.preventDefault();
  const text = $("body").value.trim();
  if (!text || !state.current) return;
  $("body").value = "";
  try { await api("POST", `/api/chats/${state.current}/messages`, { body: text }); } catch (error) { toast(error.message); $("body").value = text; }
}

async function createChat(event) {
  event.preventDefault();
  const members = [...document.querySelectorAll("#chat-members input:checked")].map((i) => i.value);
  if (!members.length) { toast("Pick at least one person to chat with"); return; }
  try {
    const created = await api("POST", "/api/chats", { title: $("chat-title").value, memberUserIds: members });
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
  state.hub = new HubClient(token, {
    onConnected(reconnect) {
      setConnection(true);
      log("connect", reconnect ? "reconnected: resyncing every chat over REST" : "connected to /hubs/messenger");
      loadChats().catch((error) => log("error", error.message));
      if (reconnect) for (const chatId of state.chats.keys()) resync(chatId, "reconnect", 20);
    },
    onDisconnected() { setConnection(false); log("disconnect", "connection lost: reconnecting…"); },
    onRefused(error) { log("error", `hub refused: ${error}`); },
    onEvent: (target, payload) => onEvent(target, payload),
  });
  state.hub.start();
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
    onEvent(state.lastPush.target, state.lastPush.payload, true);
  };
  $("fault-drop").onclick = () => {
    state.loseNext = true;
    $("fault-drop").classList.add("armed");
    log("lost", "the next message push will be lost (simulated)");
  };
  $("fault-cut").onclick = () => { log("disconnect", "cutting the WebSocket (simulated)"); state.hub?.cut(); };
  document.addEventListener("visibilitychange", markRead);
  setInterval(tick, 1000);
  const saved = sessionStorage.getItem("demo-session");
  if (saved) { const { user, token } = JSON.parse(saved); start(user, token); }
}

boot();
