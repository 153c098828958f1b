"""Pre-built server frames: what a WebSocket client parses out of :func:`text_frame`."""

from __future__ import annotations

import pytest
from websockets.frames import Frame, Opcode
from websockets.streams import StreamReader

from realtime_dispatch.hub.wire.framing import text_frame


def _parse(data: bytes) -> Frame:
    reader = StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    parser = Frame.parse(reader.read_exact, mask=False, max_size=None)
    try:
        next(parser)
    except StopIteration as done:
        frame: Frame = done.value
    else:  # pragma: no cover - the parser wanted more bytes than the frame holds
        pytest.fail("incomplete frame")
    assert reader.at_eof() or not reader.buffer
    return frame


@pytest.mark.parametrize("size", [0, 1, 125, 126, 65535, 65536, 200_000])
def test_text_frame_is_one_final_unmasked_text_frame(size: int) -> None:
    payload = ('{"type":1,"target":"t","arguments":["' + "é" * (size // 2) + '"]}\x1e').encode()
    payload = payload[: max(size, 0)] if size < len(payload) else payload
    frame = _parse(text_frame(payload))
    assert frame.opcode is Opcode.TEXT
    assert frame.fin
    assert frame.data == payload
