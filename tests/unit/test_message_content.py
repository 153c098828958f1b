"""The message kinds' rules (pure): which fields each kind takes, and the fingerprint that tells
a retried send from a reused ``clientMessageId``."""

from __future__ import annotations

import hashlib

import orjson
import pytest

from realtime_dispatch.contracts.messenger_rest import MessageKind, content_problems
from realtime_dispatch.messenger.messages import MessageContent
from realtime_dispatch.messenger.refusals import InvalidInput

K = MessageKind
META = {"fileId": "f", "name": "a.pdf", "size": 1, "contentType": "application/pdf"}


@pytest.mark.parametrize(
    ("kind", "given", "problems"),
    [
        (K.TEXT, {"body"}, []),
        (K.TEXT, set(), [("body", "missing")]),
        (K.TEXT, {"body", "cardText"}, [("cardText", "not_allowed")]),
        (K.FILE, {"fileMeta"}, []),
        (K.FILE, {"fileMeta", "body"}, []),
        (K.FILE, {"body"}, [("fileMeta", "missing")]),
        (K.CARD, {"cardText"}, []),
        (
            K.CARD,
            {"cardText", "body", "fileMeta"},
            [("body", "not_allowed"), ("fileMeta", "not_allowed")],
        ),
    ],
)
def test_content_problems_per_kind(
    kind: MessageKind, given: set[str], problems: list[tuple[str, str]]
) -> None:
    assert content_problems(kind, given) == problems


def test_check_names_the_field() -> None:
    with pytest.raises(InvalidInput, match="fileMeta is required"):
        MessageContent(K.FILE, body="x").check()
    with pytest.raises(InvalidInput, match="body is not allowed"):
        MessageContent(K.CARD, body="x", card_text="y").check()
    MessageContent(K.FILE, body="caption", file_meta=META).check()


def test_fingerprint_is_the_content_and_nothing_else() -> None:
    key = b"k" * 32
    a = MessageContent(K.FILE, file_meta=META)
    reordered = MessageContent(K.FILE, file_meta=dict(reversed(list(META.items()))))
    assert a.fingerprint(key) == reordered.fingerprint(key)
    assert a.fingerprint(key) != MessageContent(K.FILE, body="x", file_meta=META).fingerprint(key)
    assert MessageContent(body="x").fingerprint(key) != MessageContent(
        K.CARD, card_text="x"
    ).fingerprint(key)


def test_fingerprint_is_keyed() -> None:
    """Whoever reads the table cannot test guesses of the content against it without the key."""
    content = MessageContent(body="PIN 4711")
    canonical = orjson.dumps(["Text", "PIN 4711", None, None], option=orjson.OPT_SORT_KEYS)
    assert content.fingerprint(b"a" * 32) != content.fingerprint(b"b" * 32)
    assert content.fingerprint(b"a" * 32) != hashlib.sha256(canonical).digest()
