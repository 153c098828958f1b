"""The built-in kinds whose catalogue row's builder is ``ids``: the payload is the row's own
reference ids (``chatId``, ``refId``, ``messageId``, ``seq``, ``targetUserId``,
``sessionKind``: those its contract has), read from no query, so a kind that announces a hard
delete needs no row to read. The built-in twin of a manifest's ids-only ``-- kind:`` block.

Which kinds it builds follows from :mod:`realtime_dispatch.values.catalogue` (and their
contracts from :data:`~realtime_dispatch.contracts.events.EVENT_MODELS`): a new ids kind is
its row, its contract and its test, with no builder to write.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from realtime_dispatch.contracts.base import Contract
from realtime_dispatch.contracts.events import EVENT_MODELS
from realtime_dispatch.database.connections import DbConnection
from realtime_dispatch.delivery.push import Push
from realtime_dispatch.dispatch.projections.builder import BuildResults, RowIntent
from realtime_dispatch.dispatch.projections.encoding import FAST, PayloadEncoder, encoded
from realtime_dispatch.errors import PayloadBuildError
from realtime_dispatch.outbox.model import RealtimeDispatchKind
from realtime_dispatch.values.catalogue import CATALOGUE, IDS_ONLY

IDS_KINDS = frozenset(
    RealtimeDispatchKind(entry.kind) for entry in CATALOGUE if entry.builder == IDS_ONLY
)
_ID_FIELDS = ("chat_id", "ref_id", "message_id", "seq", "target_user_id", "session_kind")


class IdsPayloadBuilder:
    """Builds every built-in ``ids`` kind (``kinds`` is empty while the catalogue has none),
    each with its event's contract (``models`` replaces that map for a kind, in a test)."""

    query = IDS_ONLY

    def __init__(
        self,
        *,
        encoder: PayloadEncoder = FAST,
        kinds: frozenset[RealtimeDispatchKind] = IDS_KINDS,
        models: Mapping[RealtimeDispatchKind, type[Contract]] | None = None,
    ) -> None:
        self.encoder = encoder
        self.kinds = kinds
        self.models = {kind: EVENT_MODELS[kind.event_name] for kind in kinds} | dict(models or {})

    async def build(self, conn: DbConnection, items: Sequence[RowIntent]) -> BuildResults:
        results: BuildResults = {}
        for item in items:
            intent = item.intent
            model = self.models[intent.kind]
            fields = {
                name: getattr(intent, name)
                for name in _ID_FIELDS
                if name in model.model_fields and getattr(intent, name) is not None
            }
            payload = encoded(self.encoder, model, fields)
            results[item.row.id] = (
                payload
                if isinstance(payload, PayloadBuildError)
                else Push(intent.group, intent.kind.event_name, payload_json=payload)
            )
        return results
