"""What a worker's ``/readyz`` says for each combination of its runners' states."""

from dataclasses import dataclass

import pytest

from realtime_dispatch.dispatch.availability import Outage, RunnerState, reconnect_cap
from realtime_dispatch.dispatch.probes import readiness
from realtime_dispatch.outbox.backoff import JITTER
from realtime_dispatch.outbox.partitions import partitions


@dataclass
class _Dispatcher:
    partition: object


@dataclass
class _Runner:
    dispatcher: _Dispatcher
    state: RunnerState


def runners(*states: RunnerState) -> list[_Runner]:
    shares = partitions(len(states))
    return [_Runner(_Dispatcher(share), state) for share, state in zip(shares, states, strict=True)]


@pytest.mark.parametrize(
    ("states", "ready", "status"),
    [
        ((RunnerState.ACTIVE,), True, "ready"),
        ((RunnerState.STANDBY,), True, "ready"),  # waits for the lock: can take over
        ((RunnerState.ACTIVE, RunnerState.STANDBY), True, "ready"),
        ((RunnerState.STARTING,), False, "not ready"),
        ((RunnerState.UNAVAILABLE,), False, "database_unavailable"),
        ((RunnerState.ACTIVE, RunnerState.UNAVAILABLE), False, "database_unavailable"),
        ((RunnerState.FAILING,), False, "not ready"),
        ((RunnerState.STOPPED,), False, "not ready"),
    ],
)
def test_readiness_by_runner_states(
    states: tuple[RunnerState, ...], ready: bool, status: str
) -> None:
    answer, body = readiness(runners(*states))  # type: ignore[arg-type]
    assert (answer, body["status"]) == (ready, status)
    assert list(body["runners"].values()) == [s.value for s in states]  # type: ignore[attr-defined]


def test_no_runner_is_not_ready() -> None:
    assert readiness([])[0] is False


def test_the_reconnect_wait_is_bounded_by_the_polling_interval_and_5_s() -> None:
    assert reconnect_cap(1.0) == 1.0
    assert reconnect_cap(30.0) == 5.0
    assert reconnect_cap(0.01) == 0.1


def test_an_outage_backs_off_doubling_from_0_1_s_with_jitter() -> None:
    outage = Outage(started=0.0, cap=5.0)
    longest = []
    for _ in range(8):
        longest.append(outage.next_delay(rand=lambda: 0.0))
        shortest = outage.next_delay(rand=lambda: 1.0)
        assert shortest == pytest.approx(longest[-1] * (1 - JITTER))
        outage.failed_again()
    assert longest == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0])
