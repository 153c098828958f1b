-- The migration Prisma Migrate makes from schema.prisma (text ids, camelCase columns, quoted
-- model names), and the membership trigger added to it by hand. The outbox's schema is another
-- migration: `REALTIME_KEY_TYPE=text realtime-dispatch migrate --print-sql --only outbox`.

-- CreateTable
CREATE TABLE "Conversation" (
    "id" TEXT NOT NULL,
    "title" TEXT NOT NULL,
    "lastSeq" INTEGER NOT NULL DEFAULT 0,
    "createdAt" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "deletedAt" TIMESTAMPTZ(3),

    CONSTRAINT "Conversation_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "Member" (
    "id" TEXT NOT NULL,
    "conversationId" TEXT NOT NULL,
    "accountId" TEXT NOT NULL,
    "joinedAt" TIMESTAMPTZ(6) NOT NULL DEFAULT now(),
    "leftAt" TIMESTAMPTZ(6),

    CONSTRAINT "Member_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "Message" (
    "id" TEXT NOT NULL,
    "conversationId" TEXT NOT NULL,
    "seq" INTEGER NOT NULL,
    "authorId" TEXT NOT NULL,
    "body" TEXT NOT NULL,
    "sentAt" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "editedAt" TIMESTAMPTZ(3),
    "deletedAt" TIMESTAMPTZ(3),

    CONSTRAINT "Message_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE INDEX "Member_conversationId_accountId_idx" ON "Member"("conversationId", "accountId");

-- CreateIndex
CREATE INDEX "Member_accountId_idx" ON "Member"("accountId");

-- CreateIndex
CREATE UNIQUE INDEX "Message_conversationId_seq_key" ON "Message"("conversationId", "seq");

-- AddForeignKey
ALTER TABLE "Member" ADD CONSTRAINT "Member_conversationId_fkey" FOREIGN KEY ("conversationId") REFERENCES "Conversation"("id") ON DELETE RESTRICT ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "Message" ADD CONSTRAINT "Message_conversationId_fkey" FOREIGN KEY ("conversationId") REFERENCES "Conversation"("id") ON DELETE RESTRICT ON UPDATE CASCADE;

-- Added by hand: membership changes reach every hub replica live, whoever writes them. A hint
-- (no "active"): the hubs read the account's chats again through the manifest's member_chats.
CREATE FUNCTION realtime_notify_membership() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('realtime_membership', json_build_object(
            'chatId', OLD."conversationId", 'userId', OLD."accountId")::text);
    ELSIF TG_OP = 'INSERT' OR NEW."leftAt" IS DISTINCT FROM OLD."leftAt" THEN
        PERFORM pg_notify('realtime_membership', json_build_object(
            'chatId', NEW."conversationId", 'userId', NEW."accountId")::text);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER "Member_realtime" AFTER INSERT OR UPDATE OR DELETE ON "Member"
    FOR EACH ROW EXECUTE FUNCTION realtime_notify_membership();
