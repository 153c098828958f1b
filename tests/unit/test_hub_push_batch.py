"""The batch push endpoint's answers, checked without a server: each push's status as the
one-push form would answer it, whatever pushes come before it in the batch."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from realtime_dispatch.errors import HubUnavailable
from realtime_dispatch.hub.serving.push_api import batch_answer
from realtime_dispatch.hub.wire.protocol import invocation_frame


class _Hub:
    def __init__(self, failing: set[int] = frozenset()) -> None:  # type: ignore[assignment]
        self.published: list[tuple[str, bytes]] = []
        self.marks: list[object] = []
        self._failing = failing

    async def publish_frames(
        self, items: list[tuple[str, bytes]], marks: object = None
    ) -> list[object]:
        self.published += items
        self.marks.append(marks)
        error = HubUnavailable("down", code="BackplaneUnavailable")
        return [error if index in self._failing else None for index in range(len(items))]


def _answer(hub: _Hub, pushes: list[Any]) -> tuple[int, list[dict[str, Any]]]:
    answer = batch_answer(hub, orjson.dumps({"pushes": pushes}))  # type: ignore[arg-type]
    if not isinstance(answer, tuple):
        answer = asyncio.run(answer)
    status, body = answer
    return status, orjson.loads(body)["results"]


def test_each_push_is_checked_whatever_comes_before_it() -> None:
    push = {"group": "chat:a", "target": "t", "arguments": [1]}
    pushes = [
        push,
        {**push, "group": ""},
        push,
        "not an object",
        {**push, "group": 3},
        {**push, "group": None},
        {"target": "t", "arguments": [2]},  # no group, after a valid one
        {**push, "target": ""},
        {**push, "arguments": 5},
        {**push, "group": "chat:b"},
        {**push, "group": "chat:b\n"},
        push,
    ]
    hub = _Hub()
    status, results = _answer(hub, pushes)
    assert status == 200
    assert [result["status"] for result in results] == [
        202,
        400,
        202,
        400,
        400,
        400,
        400,
        400,
        400,
        202,
        400,
        202,
    ]
    assert [result.get("code") for result in results if result["status"] == 400] == [
        "InvalidGroup",
        "InvalidBody",
        "InvalidGroup",
        "InvalidGroup",
        "InvalidGroup",
        "InvalidTarget",
        "InvalidArguments",
        "InvalidGroup",
    ]
    assert hub.published == [
        ("chat:a", invocation_frame("t", [1])),
        ("chat:a", invocation_frame("t", [1])),
        ("chat:b", invocation_frame("t", [1])),
        ("chat:a", invocation_frame("t", [1])),
    ]


def test_a_batch_all_accepted_and_one_that_failed_in_part() -> None:
    pushes = [{"group": "chat:a", "target": "t", "arguments": [n]} for n in range(3)]
    assert _answer(_Hub(), pushes) == (200, [{"status": 202}] * 3)
    assert _answer(_Hub(), []) == (200, [])
    _, results = _answer(_Hub(failing={1}), pushes)
    assert [result["status"] for result in results] == [202, 503, 202]
    assert _answer(_Hub(), pushes) == (200, [{"status": 202}] * 3)  # nothing kept of that one


def test_a_batchs_marks_are_handed_to_the_publish_and_none_means_none() -> None:
    """A batch from another process is never the running pass's: without ``marks`` its publish
    gets an empty tuple (not None, which would read the contextvar); with them, those."""
    push = {"group": "chat:a", "target": "t", "arguments": []}
    hub = _Hub()
    _answer(hub, [push])
    answer = batch_answer(hub, orjson.dumps({"pushes": [push], "marks": ["m1", "m2"]}))  # type: ignore[arg-type]
    assert not isinstance(answer, tuple)
    asyncio.run(answer)
    assert hub.marks == [(), ("m1", "m2")]
    refused = batch_answer(hub, orjson.dumps({"pushes": [push], "marks": "m1"}))  # type: ignore[arg-type]
    assert isinstance(refused, tuple)
    assert refused[0] == 400
    assert orjson.loads(refused[1])["code"] == "InvalidMarks"
    assert len(hub.marks) == 2
