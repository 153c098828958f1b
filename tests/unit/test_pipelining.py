"""Where a pipelining connection's bytes are cut (:mod:`realtime_dispatch.edge.pipelining`),
and the parser's rule the cut rests on."""

import httptools
import pytest

from realtime_dispatch.edge.pipelining import last_bytes, parseable

GET = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"


class Heads:
    def __init__(self) -> None:
        self.complete = 0

    def on_headers_complete(self) -> None:
        self.complete += 1


def parsed(data: bytes) -> int:
    heads = Heads()
    parser = httptools.HttpRequestParser(heads)
    parser.set_dangerous_leniencies(lenient_data_after_close=True)  # as uvicorn sets it
    parser.feed_data(data)
    return heads.complete


@pytest.mark.parametrize(
    "head",
    [
        b"GET / HTTP/1.1\n\n",
        b"GET / HTTP/1.1\r\nHost: x\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\n\n",
        b"GET /\r\nGET /\r\n",
    ],
)
def test_the_parser_completes_no_head_without_a_crlf_crlf(head: bytes) -> None:
    with pytest.raises(httptools.HttpParserError):
        parsed(head * 3)


def test_a_run_within_the_room_goes_whole() -> None:
    data = GET * 3
    assert parseable(data, 0, b"", 3) == len(data)
    assert parseable(data, 0, b"", 8) == len(data)
    assert parseable(GET[:10], 0, b"", 1) == 10  # no head end: nothing can complete


def test_a_run_past_the_room_is_cut_after_the_last_head_it_may_complete() -> None:
    data = GET * 100
    cut = parseable(data, 0, b"", 8)
    assert cut == 8 * len(GET)
    assert parsed(data[:cut]) == 8
    assert parseable(data, cut, data[cut - 3 : cut], 2) == cut + 2 * len(GET)


def test_no_room_takes_nothing() -> None:
    assert parseable(GET * 2, 5, b"", 0) == 5
    assert parseable(GET * 2, 5, b"", -1) == 5


@pytest.mark.parametrize("split", [1, 2, 3])
def test_a_head_end_straddling_two_reads_counts_in_the_second(split: int) -> None:
    first, second = GET[: len(GET) - split], GET[len(GET) - split :] + GET * 5
    tail = last_bytes(b"", first, 0, len(first))
    cut = parseable(second, 0, tail, 1)
    assert cut == split  # the first head ends here: the room of one is used
    assert parsed(first + second[:cut]) == 1


def test_body_bytes_only_cut_earlier() -> None:
    post = b"POST /x HTTP/1.1\r\nContent-Length: 8\r\n\r\n\r\n\r\n\r\n\r\n"
    data = post + GET * 4
    cut = parseable(data, 0, b"", 2)
    assert parsed(data[:cut]) <= 2
    assert cut < len(post) + 2 * len(GET)


def test_the_last_bytes_follow_short_pieces() -> None:
    assert last_bytes(b"abc", b"xyz", 0, 3) == b"xyz"
    assert last_bytes(b"abc", b"xyz", 1, 2) == b"bcy"
    assert last_bytes(b"", b"\r\n", 0, 2) == b"\r\n"
