"""The published event → model map covers every outbox kind, and nothing else."""

from __future__ import annotations

from realtime_dispatch.contracts.events import EVENT_MODELS, GROUP_EVENT_MODELS, event_model
from realtime_dispatch.outbox.model import RealtimeDispatchKind


def test_every_kind_has_a_model_under_its_event_name() -> None:
    assert set(EVENT_MODELS) == {kind.event_name for kind in RealtimeDispatchKind}


def test_group_shapes_are_picked_by_their_field() -> None:
    assert set(GROUP_EVENT_MODELS) <= set(EVENT_MODELS)
    for event, group in GROUP_EVENT_MODELS.items():
        assert event_model(event, {"conferenceId": "x"}) is group
        assert event_model(event, {"callId": "x"}) is EVENT_MODELS[event]
    assert event_model("no_such_event", {}) is None


def test_the_client_events_module_still_names_every_model() -> None:
    from realtime_dispatch.client import events

    assert events.CallInvited is EVENT_MODELS["call_invited"]
    assert events.GroupCallEnded is GROUP_EVENT_MODELS["call_ended"]
