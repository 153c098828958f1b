"""The dispatcher: draining a backlog, commit-to-push lag, partitions, retention, the outcome
wait, the owners' commit cost and the paced media jobs beside it."""
