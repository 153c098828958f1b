"""Partitioned dispatch: which share of the outbox a runner claims, and the lock it holds.

A row belongs to partition ``hash(chat_id, else target_user_id) mod N`` (computed in the claim,
so nothing changes for writers): a chat's rows, or a user's, always fall in one partition and
keep their order there. Each partition has its own advisory lock, derived from the spec's key;
with one partition (the default) everything is exactly the spec's single runner: the spec's key,
an unfiltered claim.
"""

from __future__ import annotations

from dataclasses import dataclass

SPEC_LOCK_NAME = "job:scheduled:messenger-realtime-dispatch"
MAX_PARTITIONS = 256


@dataclass(frozen=True, slots=True)
class Partition:
    index: int
    count: int

    def __post_init__(self) -> None:
        if not 0 <= self.index < self.count <= MAX_PARTITIONS:
            raise ValueError(f"no partition {self.index} of {self.count}")

    @property
    def lock_name(self) -> str:
        """``hashtextextended(lock_name, 0)`` is the partition's advisory lock key."""
        if self.count == 1:
            return SPEC_LOCK_NAME
        return f"{SPEC_LOCK_NAME}:{self.index}/{self.count}"

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


WHOLE = Partition(0, 1)


def partitions(count: int) -> list[Partition]:
    return [Partition(index, count) for index in range(count)]
