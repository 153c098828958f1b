// The writes of a Prisma app on schema.sql, as the SQL its client sends, through the `pg`
// package: each command is one transaction, and the outbox row commits with the change it
// announces. The Prisma code each one stands for is beside it (docs/adopting.md, "A Prisma /
// Node app").
//
//   DATABASE_URL=postgresql://… node writer.mjs <command> '<json arguments>'
//
// Commands (each prints one JSON line with what it made):
//   conversation {"title", "members": [accountId, …]}  → {"conversationId"}
//   post         {"conversationId", "authorId", "body"} → {"messageId", "seq"}
//   leave        {"conversationId", "accountId"}       → {"left": true|false}
//   join         {"conversationId", "accountId"}       → {"memberId"}
import { randomUUID } from "node:crypto";
import pg from "pg";

async function inTransaction(client, work) {
  // prisma.$transaction(async (tx) => { … }): BEGIN … COMMIT, ROLLBACK on any error.
  await client.query("BEGIN");
  try {
    const result = await work();
    await client.query("COMMIT");
    return result;
  } catch (error) {
    await client.query("ROLLBACK");
    throw error;
  }
}

const commands = {
  // tx.conversation.create({ data: { title, members: { create: members.map(…) } } }):
  // joinedAt is left out, so the database's now() fills it (@default(dbgenerated("now()"))).
  async conversation(client, { title, members }) {
    const conversationId = randomUUID();
    await inTransaction(client, async () => {
      await client.query('INSERT INTO "Conversation" ("id", "title") VALUES ($1, $2)', [
        conversationId,
        title,
      ]);
      for (const accountId of members) {
        await client.query(
          'INSERT INTO "Member" ("id", "conversationId", "accountId") VALUES ($1, $2, $3)',
          [randomUUID(), conversationId, accountId],
        );
      }
    });
    return { conversationId };
  },

  async post(client, { conversationId, authorId, body }) {
    return inTransaction(client, async () => {
      // const [c] = await tx.$queryRaw`SELECT "lastSeq" FROM "Conversation"
      //   WHERE "id" = ${conversationId} AND "deletedAt" IS NULL FOR UPDATE`;
      // The row lock orders the posts of one conversation: the next number is taken, used and
      // committed before another transaction can read it.
      const locked = await client.query(
        'SELECT "lastSeq" FROM "Conversation" WHERE "id" = $1 AND "deletedAt" IS NULL FOR UPDATE',
        [conversationId],
      );
      if (locked.rowCount !== 1) throw new Error(`no conversation ${conversationId}`);
      const seq = locked.rows[0].lastSeq + 1;
      // await tx.conversation.update({ where: { id: conversationId }, data: { lastSeq: seq } });
      await client.query('UPDATE "Conversation" SET "lastSeq" = $2 WHERE "id" = $1', [
        conversationId,
        seq,
      ]);
      // const message = await tx.message.create({ data: { conversationId, seq, authorId, body } });
      const messageId = randomUUID();
      await client.query(
        'INSERT INTO "Message" ("id", "conversationId", "seq", "authorId", "body")' +
          " VALUES ($1, $2, $3, $4, $5)",
        [messageId, conversationId, seq, authorId, body],
      );
      // await tx.$executeRaw`INSERT INTO messenger.realtime_outbox
      //   (kind, target_kind, chat_id, message_id, seq)
      //   VALUES ('MessageReceived', 'ChatGroup', ${conversationId}, ${message.id}, ${seq})`;
      await client.query(
        "INSERT INTO messenger.realtime_outbox (kind, target_kind, chat_id, message_id, seq)" +
          " VALUES ('MessageReceived', 'ChatGroup', $1, $2, $3)",
        [conversationId, messageId, seq],
      );
      return { messageId, seq };
    });
  },

  // await prisma.$executeRaw`UPDATE "Member" SET "leftAt" = now() WHERE …`: the database's
  // clock, as the outbox's created_at (tx.member.update({ data: { leftAt: new Date() } }) would
  // write the app server's).
  async leave(client, { conversationId, accountId }) {
    const left = await client.query(
      'UPDATE "Member" SET "leftAt" = now()' +
        ' WHERE "conversationId" = $1 AND "accountId" = $2 AND "leftAt" IS NULL',
      [conversationId, accountId],
    );
    return { left: left.rowCount > 0 };
  },

  // await prisma.member.create({ data: { conversationId, accountId } }): a new span.
  async join(client, { conversationId, accountId }) {
    const memberId = randomUUID();
    await client.query(
      'INSERT INTO "Member" ("id", "conversationId", "accountId") VALUES ($1, $2, $3)',
      [memberId, conversationId, accountId],
    );
    return { memberId };
  },
};

const [name, raw = "{}"] = process.argv.slice(2);
const command = commands[name];
if (!command) {
  console.error(`writer.mjs: unknown command ${name ?? "(none)"}: ${Object.keys(commands).join(", ")}`);
  process.exit(2);
}
if (!process.env.DATABASE_URL) {
  console.error("writer.mjs: DATABASE_URL is not set");
  process.exit(2);
}
const client = new pg.Client({ connectionString: process.env.DATABASE_URL });
await client.connect();
try {
  console.log(JSON.stringify(await command(client, JSON.parse(raw))));
} finally {
  await client.end();
}
