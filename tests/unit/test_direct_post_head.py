"""The response head of a direct POST (:mod:`realtime_dispatch.edge.direct_post`):
uvicorn's default headers joined once, and again whenever uvicorn replaces them."""

from __future__ import annotations

from realtime_dispatch.edge.direct_post import _DefaultHeaders


def test_the_head_follows_uvicorns_list_of_default_headers() -> None:
    head = _DefaultHeaders()
    first = [(b"date", b"Thu, 03 Dec 2026 09:00:00 GMT"), (b"server", b"uvicorn")]
    assert head.of(first) == (
        b"date: Thu, 03 Dec 2026 09:00:00 GMT\r\nserver: uvicorn\r\n"
        b"content-type: application/json\r\n"
    )
    assert head.of(first) is head.of(first)  # joined once
    second = [(b"date", b"Thu, 03 Dec 2026 09:00:01 GMT"), (b"server", b"uvicorn")]
    assert head.of(second).startswith(b"date: Thu, 03 Dec 2026 09:00:01 GMT\r\n")
    assert head.of([]) == b"content-type: application/json\r\n"
