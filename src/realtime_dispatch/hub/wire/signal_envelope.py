"""The envelope of an ephemeral signal on the backplane (``user_typing`` today): a record for a
group's members on every replica, but for one user's connections, and not for the replica that
sent it (it delivered locally already).

``\\xff{origin}\\n{exceptUser}\\n{record}``. The leading byte is never the first byte of UTF-8
text, so a replica of an earlier version, which checks that what it relays is UTF-8, drops the
message (with a warning) rather than hand it to clients; signals therefore travel in messages of
their own, never beside pushes.
"""

from __future__ import annotations

from typing import NamedTuple

SIGNAL_MARK = b"\xff"


class Signal(NamedTuple):
    origin: str
    except_user: str
    record: bytes


def is_signal(frame: bytes) -> bool:
    return frame[:1] == SIGNAL_MARK


def encode_signal(origin: str, except_user: str, record: bytes) -> bytes:
    return b"".join((SIGNAL_MARK, origin.encode(), b"\n", except_user.encode(), b"\n", record))


def decode_signal(frame: bytes) -> Signal | None:
    """The parts of an envelope; None when it is malformed (or its record not UTF-8)."""
    if not is_signal(frame):
        return None
    origin, sep1, rest = frame[1:].partition(b"\n")
    user, sep2, record = rest.partition(b"\n")
    if not (sep1 and sep2 and origin and user and record):
        return None
    try:
        return Signal(origin.decode(), user.decode(), record if record.isascii() else _utf8(record))
    except UnicodeDecodeError:
        return None


def _utf8(record: bytes) -> bytes:
    record.decode()
    return record
