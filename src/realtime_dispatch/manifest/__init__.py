"""The projection manifest: the SQL that reads an owner's domain tables (payload projections,
the hub's memberships, which chats still exist), declared as named queries and checked against
the contract the builders read."""
