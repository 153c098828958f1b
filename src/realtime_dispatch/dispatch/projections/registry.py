"""The payload builders shipped with the package: together they cover every kind of the
catalogue, each with one projection query per batch, its SQL taken from the projection manifest
(the shipped reference manifest unless one is given). A kind's catalogue row names the query its
builder reads (``tests/unit/test_catalogue.py`` checks the builders agree).

Most kinds need no code of their own: a row whose builder is ``ids`` is built by
:class:`IdsPayloadBuilder`, and a row naming a query that no builder below claims for it by a
:class:`ColumnsBuilder` of that query (its contract's fields read from the columns of the same
names; today ``ChatUpdated``, the recordings' and the screen shares' kinds). The builders of
their own are the kinds that do more than read columns: the messages (a deleted message's body
withheld, the outbox ``seq`` checked), the read receipt (``readAt`` is the ``last_read_at``
column), the contacts and the blacklist (the audience and ``blocked`` worked out from the
entity), and the calls and conferences (a media join minted at delivery)."""

from __future__ import annotations

from collections.abc import Callable, Collection

from realtime_dispatch.auth.media import MediaMinter, MediaOptions
from realtime_dispatch.contracts.base import Contract
from realtime_dispatch.contracts.events import EVENT_MODELS
from realtime_dispatch.dispatch.projections.builder import CompositePayloadBuilder, KindBuilder
from realtime_dispatch.dispatch.projections.calls import CallPayloadBuilder
from realtime_dispatch.dispatch.projections.chats import ReadReceiptBuilder
from realtime_dispatch.dispatch.projections.conferences import (
    ConferencePayloadBuilder,
    RosterPayloadBuilder,
)
from realtime_dispatch.dispatch.projections.contacts import (
    BlacklistBuilder,
    ContactBuilder,
    ContactRequestBuilder,
)
from realtime_dispatch.dispatch.projections.declared import DeclaredKindBuilder
from realtime_dispatch.dispatch.projections.encoding import FAST, PayloadEncoder
from realtime_dispatch.dispatch.projections.ids import IdsPayloadBuilder
from realtime_dispatch.dispatch.projections.messages import MessagePayloadBuilder
from realtime_dispatch.dispatch.projections.projection import ColumnsBuilder
from realtime_dispatch.manifest.contract import CONTRACT
from realtime_dispatch.manifest.manifest import Manifest, shipped_manifest
from realtime_dispatch.outbox.model import RealtimeDispatchKind
from realtime_dispatch.values.catalogue import CATALOGUE
from realtime_dispatch.values.keys import UUID_KEYS, KeyCodec

K = RealtimeDispatchKind

# The kinds whose payload carries a media join minted at delivery, with the manifest queries
# that build them (any one present: the kind is delivered).
MEDIA_INVITES: dict[RealtimeDispatchKind, tuple[str, ...]] = {
    K.CALL_INVITED: ("calls", "conferences"),
    K.CONFERENCE_INVITED: ("conference_participants",),
    K.CONFERENCE_STARTED: ("conferences",),
}


def media_invite_kinds(manifest: Manifest | None = None) -> frozenset[str]:
    """The invite kinds ``manifest`` (the shipped one when ``None``) lets the dispatcher
    deliver: without media secrets these go out without ``media``."""
    manifest = manifest or shipped_manifest()
    return frozenset(
        kind.value
        for kind, queries in MEDIA_INVITES.items()
        if any(manifest.sql(query) is not None for query in queries)
    )


def default_builders(
    media: MediaOptions | None = None,
    *,
    encoder: PayloadEncoder = FAST,
    manifest: Manifest | None = None,
    keys: KeyCodec = UUID_KEYS,
) -> list[KindBuilder]:
    """Every builder; ``media`` supplies the secrets for join tokens (without them the media
    invites go out without ``media``); ``encoder`` writes the payloads' JSON; ``manifest``
    holds the SQL (a query it leaves out disables the kinds it serves); ``keys`` is the
    owner's key type (the other builders pass the driver's values through, which the encoder
    writes as the type wants)."""
    minter = MediaMinter(media or MediaOptions())
    e = encoder
    q = (manifest or shipped_manifest()).sql
    own: list[KindBuilder] = [
        MessagePayloadBuilder(sql=q("messages"), encoder=e, keys=keys),
        ReadReceiptBuilder(sql=q("read_receipts"), encoder=e),
        ContactRequestBuilder(sql=q("contact_requests"), encoder=e),
        ContactBuilder(sql=q("contacts"), encoder=e),
        BlacklistBuilder(sql=q("blacklist"), encoder=e),
        CallPayloadBuilder(minter, sql=q("calls"), conference_sql=q("conferences"), encoder=e),
        ConferencePayloadBuilder(minter, sql=q("conferences"), encoder=e),
        RosterPayloadBuilder(minter, sql=q("conference_participants"), encoder=e),
        IdsPayloadBuilder(encoder=e),
    ]
    claimed = {kind.value for builder in own for kind in builder.kinds}
    return own + columns_builders(claimed, q, encoder=e)


def columns_builders(
    claimed: Collection[str], sql: Callable[[str], str | None], *, encoder: PayloadEncoder = FAST
) -> list[ColumnsBuilder]:
    """A :class:`ColumnsBuilder` per manifest query for the catalogue's kinds that read one
    and that no builder of ``claimed`` builds, each kind with its event's contract; ``sql``
    gives a query's text (``None``: the manifest leaves it out, its kinds are disabled)."""
    by_query: dict[str, dict[RealtimeDispatchKind, tuple[str, type[Contract]]]] = {}
    for entry in CATALOGUE:
        if entry.query is not None and entry.kind not in claimed:
            kinds = by_query.setdefault(entry.query, {})
            kinds[RealtimeDispatchKind(entry.kind)] = (entry.target, EVENT_MODELS[entry.event])
    return [
        ColumnsBuilder(CONTRACT[query], kinds, sql=sql(query), encoder=encoder)
        for query, kinds in by_query.items()
    ]


def default_payload_builder(
    media: MediaOptions | None = None,
    *,
    encoder: PayloadEncoder = FAST,
    manifest: Manifest | None = None,
    keys: KeyCodec = UUID_KEYS,
) -> CompositePayloadBuilder:
    """What the dispatcher calls: every shipped builder over ``manifest``'s queries (the
    shipped reference manifest when ``None``), ids written as ``keys`` want."""
    manifest = manifest or shipped_manifest()
    return CompositePayloadBuilder(
        default_builders(media, encoder=encoder, manifest=manifest, keys=keys),
        deleted_chats_sql=manifest.sql("deleted_chats"),
        chat_alive_sql=manifest.sql("chat_alive"),
        declared=[DeclaredKindBuilder(kind, keys=keys) for kind in manifest.kinds],
    )
