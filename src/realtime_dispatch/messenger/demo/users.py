"""The demo's cast: fixed names and ids (the README's curl session uses the same ids)."""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID


@dataclass(frozen=True, slots=True)
class DemoUser:
    key: str
    name: str
    user_id: UUID
    color: str

    def as_json(self) -> dict[str, str]:
        return {
            "key": self.key,
            "name": self.name,
            "userId": str(self.user_id),
            "color": self.color,
        }


DEMO_USERS: tuple[DemoUser, ...] = (
    DemoUser("alice", "Alice", UUID("5b1c2a3e-0000-4000-8000-000000000001"), "#e4572e"),
    DemoUser("bob", "Bob", UUID("5b1c2a3e-0000-4000-8000-000000000002"), "#2e86ab"),
    DemoUser("carol", "Carol", UUID("5b1c2a3e-0000-4000-8000-000000000003"), "#3bb273"),
    DemoUser("dave", "Dave", UUID("5b1c2a3e-0000-4000-8000-000000000004"), "#8f5bd6"),
)
BY_KEY = {user.key: user for user in DEMO_USERS}
