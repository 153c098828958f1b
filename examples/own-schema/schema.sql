-- An adopter's own messenger schema, as EF Core (Npgsql) creates it: quoted PascalCase names,
-- Guid → uuid, DateTime → timestamp with time zone, enums stored as integers. It shares no
-- table or column name with the reference messenger; realtime-dispatch reads it only through
-- projections.sql.

CREATE TABLE "Conversations" (
    "Id"         uuid                     NOT NULL,
    "Topic"      text                     NOT NULL,
    "LastNumber" bigint                   NOT NULL DEFAULT 0,
    "CreatedUtc" timestamp with time zone NOT NULL DEFAULT now(),
    "DeletedUtc" timestamp with time zone NULL,  -- soft delete
    CONSTRAINT "PK_Conversations" PRIMARY KEY ("Id")
);

CREATE TABLE "ConversationMembers" (
    "Id"             uuid                     NOT NULL,
    "ConversationId" uuid                     NOT NULL,
    "AccountId"      uuid                     NOT NULL,
    "JoinedUtc"      timestamp with time zone NOT NULL DEFAULT now(),
    "LeftUtc"        timestamp with time zone NULL,
    "LastSeenNumber" bigint                   NOT NULL DEFAULT 0,
    "LastSeenUtc"    timestamp with time zone NULL,
    CONSTRAINT "PK_ConversationMembers" PRIMARY KEY ("Id"),
    CONSTRAINT "FK_ConversationMembers_Conversations_ConversationId"
        FOREIGN KEY ("ConversationId") REFERENCES "Conversations" ("Id") ON DELETE CASCADE
);
CREATE UNIQUE INDEX "IX_ConversationMembers_ConversationId_AccountId"
    ON "ConversationMembers" ("ConversationId", "AccountId");
CREATE INDEX "IX_ConversationMembers_AccountId" ON "ConversationMembers" ("AccountId");

-- "Type": PostType { Text = 0, File = 1, Card = 2, System = 3 }
CREATE TABLE "Posts" (
    "Id"             uuid                     NOT NULL,
    "ConversationId" uuid                     NOT NULL,
    "Number"         bigint                   NOT NULL,
    "AuthorId"       uuid                     NULL,
    "Type"           integer                  NOT NULL DEFAULT 0,
    "Text"           text                     NULL,
    "Attachment"     jsonb                    NULL,
    "CardMarkdown"   text                     NULL,
    "PostedUtc"      timestamp with time zone NOT NULL DEFAULT now(),
    "EditedUtc"      timestamp with time zone NULL,
    "RemovedUtc"     timestamp with time zone NULL,
    CONSTRAINT "PK_Posts" PRIMARY KEY ("Id"),
    CONSTRAINT "FK_Posts_Conversations_ConversationId"
        FOREIGN KEY ("ConversationId") REFERENCES "Conversations" ("Id") ON DELETE CASCADE
);
CREATE UNIQUE INDEX "IX_Posts_ConversationId_Number" ON "Posts" ("ConversationId", "Number");

-- "State": CallState { Ringing = 0, Active = 1, Declined = 2, Missed = 3, Cancelled = 4, Ended = 5 }
CREATE TABLE "VoiceCalls" (
    "Id"           uuid                     NOT NULL,
    "CallerId"     uuid                     NOT NULL,
    "CalleeId"     uuid                     NOT NULL,
    "Room"         text                     NOT NULL,
    "State"        integer                  NOT NULL DEFAULT 0,
    "RingingUtc"   timestamp with time zone NOT NULL DEFAULT now(),
    "AnsweredUtc"  timestamp with time zone NULL,
    "FinishedUtc"  timestamp with time zone NULL,
    "FinishedById" uuid                     NULL,
    CONSTRAINT "PK_VoiceCalls" PRIMARY KEY ("Id")
);

-- Membership reaches every hub replica live: the trigger notifies inside the membership
-- transaction, so the change is announced exactly when it commits (and never if it rolls back).
-- The notification is a hint (no "active"): each hub reads the user's chats again through the
-- manifest's member_chats, so the query, not the row that fired, says who is a member.
CREATE FUNCTION "RealtimeNotifyMembership"() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('realtime_membership', json_build_object(
            'chatId', OLD."ConversationId", 'userId', OLD."AccountId")::text);
    ELSIF TG_OP = 'INSERT' OR NEW."LeftUtc" IS DISTINCT FROM OLD."LeftUtc" THEN
        PERFORM pg_notify('realtime_membership', json_build_object(
            'chatId', NEW."ConversationId", 'userId', NEW."AccountId")::text);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER "TR_ConversationMembers_Realtime"
    AFTER INSERT OR UPDATE OR DELETE ON "ConversationMembers"
    FOR EACH ROW EXECUTE FUNCTION "RealtimeNotifyMembership"();
