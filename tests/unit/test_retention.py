from realtime_dispatch.dispatch.retention import RetentionPolicy


def test_batch_grows_while_fast_and_shrinks_when_slow_within_bounds() -> None:
    p = RetentionPolicy(batch=1000, min_batch=500, max_batch=4000, target_batch_seconds=0.05)
    p.observe(1000, 1000, 0.01)
    assert p.batch == 2000
    p.observe(2000, 2000, 0.01)
    p.observe(4000, 4000, 0.01)
    assert p.batch == 4000  # capped
    p.observe(4000, 120, 0.001)
    assert p.batch == 4000  # a partial batch says nothing about speed
    p.observe(4000, 4000, 0.5)
    p.observe(2000, 2000, 0.5)
    p.observe(1000, 1000, 0.5)
    assert p.batch == 500  # floored


def test_caught_up_waits_the_interval_behind_sweeps_again_with_a_duty_share() -> None:
    p = RetentionPolicy(every=60, duty=0.25, min_budget=0.05, max_budget=2.0)
    assert p.due(0.0)  # first turn
    assert p.budget(0.0) == 2.0
    p.finish(10.0, caught_up=True)
    assert not p.due(69.0)
    assert p.due(70.0)
    p.finish(100.0, caught_up=False)
    assert p.due(100.001)  # behind: at the next turn
    assert p.budget(104.0) == 1.0  # a quarter of the 4 s since the last sweep
    assert p.budget(100.01) == 0.05
    assert p.budget(200.0) == 2.0


def test_vacuum_only_when_dead_versions_outnumber_live_ones_and_are_many() -> None:
    p = RetentionPolicy(vacuum_min_dead=50_000)
    assert not p.needs_vacuum(live=10_000, dead=40_000)  # too few to be worth a scan
    assert not p.needs_vacuum(live=200_000, dead=100_000)  # autovacuum's business
    assert p.needs_vacuum(live=10_000, dead=60_000)
    assert p.needs_vacuum(live=0, dead=50_000)
