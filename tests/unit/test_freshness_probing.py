"""The freshness bench's probing: visible times recorded, misses counted, and probing ends after
BEHIND_AFTER misses in a row (a store that does not keep up), with the verdict printed."""

import pytest

from deltastate.bench import freshness
from deltastate.bench.floor import against_floor_lines
from deltastate.bench.freshness import BEHIND_AFTER, FreshnessFigures, probe_each_second


@pytest.fixture(autouse=True)
def no_pauses(monkeypatch):
    monkeypatch.setattr(freshness.time, "sleep", lambda _: None)


def figures() -> FreshnessFigures:
    return FreshnessFigures("trade_stats", "window", "committed", 2000, "1s", 2)


def test_misses_apart_do_not_stop_probing() -> None:
    answers = [0.5, None, 1.5, None, 2.5, None, None, 3.0]
    asked: list[int] = []
    found = figures()
    probe_each_second(found, len(answers), lambda i: asked.append(i) or answers[i])
    assert asked == list(range(len(answers)))
    assert found.visible_s == [a for a in answers if a is not None] and found.missed == 4
    assert found.fell_behind_at is None
    assert "fell behind" not in "\n".join(found.lines())


def test_misses_in_a_row_end_probing() -> None:
    answers = [0.5, 2.0, *[None] * BEHIND_AFTER, 1.0, 1.0]
    asked: list[int] = []
    found = figures()
    probe_each_second(found, len(answers), lambda i: asked.append(i) or answers[i])
    assert asked == list(range(2 + BEHIND_AFTER))  # nothing probed after the last miss in a row
    assert (found.visible_s, found.missed, found.fell_behind_at) == ([0.5, 2.0], BEHIND_AFTER, 1 + BEHIND_AFTER)
    printed = "\n".join(found.lines())
    assert f"probing stopped after probe {2 + BEHIND_AFTER}" in printed and "does not keep up" in printed


def test_pauses_between_probes_vary_within_a_second(monkeypatch) -> None:
    pauses: list[float] = []
    monkeypatch.setattr(freshness.time, "sleep", pauses.append)
    probe_each_second(figures(), 40, lambda i: 0.5)
    # a probe returns at once here, so each pause is the rest of its second plus up to one more
    assert len(pauses) == 40 and all(0.99 <= p < 2.0 for p in pauses)
    assert max(pauses) - min(pauses) > 0.5, "the pauses do not spread the probes over the batch cycle"


def test_the_store_is_set_against_the_four_floors_by_their_batch_medians() -> None:
    store = FreshnessFigures("player_stats", "key_value", "committed", 2_000, "1s", 2, batch_s=[0.9, 1.2, 0.6])
    floors = {"none": FreshnessFigures("floor: count per key", "key_value", "none", 2_000, "1s", 2,
                                       batch_s=[0.3, 0.5, 0.4]),
              "delta": FreshnessFigures("floor: count per key, appended to Delta", "key_value", "none", 2_000, "1s",
                                        2, batch_s=[0.7, 0.5, 0.6]),
              "plan": FreshnessFigures("floor: player_stats' plan", "key_value", "none", 2_000, "1s", 2,
                                       batch_s=[0.5, 0.8, 0.75]),
              "plan-delta": FreshnessFigures("floor: player_stats' plan, appended", "key_value", "none", 2_000, "1s",
                                             2, batch_s=[0.8, 0.9, 0.7])}
    text = "\n".join(against_floor_lines(store, floors))
    assert "micro-batch p50 0.900 s" in text
    assert "= 2.25x Spark's floor (p50 0.400 s)" in text
    assert "= 1.50x Spark and Delta's floor (p50 0.600 s; Delta's append +0.200 s, the store's own work +0.300 s)" in text
    assert ("= 1.20x the store plan's floor (p50 0.750 s; the store's computation +0.350 s over Spark's floor, "
            "its changelog write and commit +0.150 s)") in text
    assert ("= 1.12x the store plan's Delta floor (p50 0.800 s; Delta's append of the plan's rows +0.050 s, "
            "the store's bookkeeping +0.100 s)") in text
    empty = FreshnessFigures("floor", "key_value", "none", 1, "1s", 2)
    for sink in floors:
        assert "no batches" in against_floor_lines(store, {**floors, sink: empty})[0]

