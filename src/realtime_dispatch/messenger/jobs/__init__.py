"""The reference messenger's media lifecycle jobs beside the dispatcher: the conference-room
reaper and the recording-finalize retry, each a single runner under its own advisory lock."""
