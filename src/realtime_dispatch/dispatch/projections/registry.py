"""The payload builders shipped with the package, one per group of kinds: together they cover
all 26 kinds, each with one projection query per batch."""

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
from realtime_dispatch.dispatch.projections.encoding import FAST, PayloadEncoder
from realtime_dispatch.dispatch.projections.messages import MessagePayloadBuilder
from realtime_dispatch.dispatch.projections.recordings import RecordingPayloadBuilder
from realtime_dispatch.dispatch.projections.screenshare import ScreenSharePayloadBuilder


def default_builders(
    media: MediaOptions | None = None, *, encoder: PayloadEncoder = FAST
) -> list[KindBuilder]:
    """Every builder; ``media`` supplies the secrets for join tokens (without them the media
    invites go out without ``media``); ``encoder`` writes the payloads' JSON."""
    minter = MediaMinter(media or MediaOptions())
    e = encoder
    return [
        MessagePayloadBuilder(encoder=e),
        ReadReceiptBuilder(encoder=e),
        ChatEventBuilder(encoder=e),
        ContactRequestBuilder(encoder=e),
        ContactBuilder(encoder=e),
        BlacklistBuilder(encoder=e),
        CallPayloadBuilder(minter, encoder=e),
        ConferencePayloadBuilder(minter, encoder=e),
        RosterPayloadBuilder(minter, encoder=e),
        RecordingPayloadBuilder(encoder=e),
        ScreenSharePayloadBuilder(encoder=e),
    ]


def default_payload_builder(
    media: MediaOptions | None = None, *, encoder: PayloadEncoder = FAST
) -> CompositePayloadBuilder:
    return CompositePayloadBuilder(default_builders(media, encoder=encoder))
