"""The payload builders shipped with the package, one per group of kinds: together they cover
all 26 kinds, each with one projection query per batch, its SQL taken from the projection
manifest (the shipped reference manifest unless one is given). A kind's catalogue row names
the query its builder reads (``tests/unit/test_catalogue.py`` checks the builders agree); a row
whose builder is ``ids`` is built by :class:`IdsPayloadBuilder`, with no query."""

from __future__ import annotations

from realtime_dispatch.auth.media import MediaMinter, MediaOptions
from realtime_dispatch.dispatch.projections.builder import CompositePayloadBuilder, KindBuilder
from realtime_dispatch.dispatch.projections.calls import CallPayloadBuilder
from realtime_dispatch.dispatch.projections.chats import ChatEventBuilder, ReadReceiptBuilder
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
from realtime_dispatch.dispatch.projections.recordings import RecordingPayloadBuilder
from realtime_dispatch.dispatch.projections.screenshare import ScreenSharePayloadBuilder
from realtime_dispatch.manifest.manifest import Manifest, shipped_manifest
from realtime_dispatch.outbox.model import RealtimeDispatchKind
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
    return [
        MessagePayloadBuilder(sql=q("messages"), encoder=e, keys=keys),
        ReadReceiptBuilder(sql=q("read_receipts"), encoder=e),
        ChatEventBuilder(sql=q("chat_events"), encoder=e),
        ContactRequestBuilder(sql=q("contact_requests"), encoder=e),
        ContactBuilder(sql=q("contacts"), encoder=e),
        BlacklistBuilder(sql=q("blacklist"), encoder=e),
        CallPayloadBuilder(minter, sql=q("calls"), conference_sql=q("conferences"), encoder=e),
        ConferencePayloadBuilder(minter, sql=q("conferences"), encoder=e),
        RosterPayloadBuilder(minter, sql=q("conference_participants"), encoder=e),
        RecordingPayloadBuilder(sql=q("recordings"), encoder=e),
        ScreenSharePayloadBuilder(sql=q("screen_shares"), encoder=e),
        IdsPayloadBuilder(encoder=e),
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
