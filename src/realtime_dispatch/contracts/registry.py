"""The payload builders shipped with the package, one per group of kinds."""

from __future__ import annotations

from realtime_dispatch.contracts.builder import CompositePayloadBuilder, KindBuilder
from realtime_dispatch.contracts.messages import MessagePayloadBuilder


def default_builders() -> list[KindBuilder]:
    return [MessagePayloadBuilder()]


def default_payload_builder() -> CompositePayloadBuilder:
    return CompositePayloadBuilder(default_builders())
