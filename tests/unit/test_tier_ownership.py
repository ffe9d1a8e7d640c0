"""The query tier's pure parts: a group assignment -> owners and standbys, and the merges of the
parts of a scattered read, each checked against the answer computed over all rows at once."""

from __future__ import annotations

import random

import pytest

from deltastate.service.tier.merge import merge_batch, merge_pages, merge_rank, merge_top, stalest
from deltastate.service.tier.ownership import plan, view_of

A, B, C = "http://a:1", "http://b:1", "http://c:1"


def test_owner_is_the_assigned_instance_and_standby_the_next_in_sorted_order() -> None:
    view = view_of([(C, [("t", 2)]), (A, [("t", 0), ("t", 3)]), (B + "/", [("t", 1)])])
    assert view.instances == (A, B, C)
    assert [view.owner("t", p) for p in range(4)] == [A, B, C, A]
    assert [view.standbys("t", p) for p in range(4)] == [[B], [C], [A], [B]]
    assert view.partitions_of(A, "t") == [0, 3]
    assert view.owner("t", 4) is None and view.standbys("t", 4) == []
    assert view.owner("other", 0) is None


def test_worker_processes_of_one_instance_are_one_instance() -> None:
    view = view_of([(A, [("t", 0)]), (A, [("t", 1)]), (B, [("t", 2)]), (B, [])], standby_count=1)
    assert view.instances == (A, B)
    assert view.partitions_of(A, "t") == [0, 1] and view.standbys("t", 0) == [B]


def test_standbys_need_other_instances() -> None:
    alone = view_of([(A, [("t", 0), ("t", 1)])], standby_count=2)
    assert alone.standbys("t", 0) == []
    two = view_of([(A, [("t", 0)]), (B, [("t", 1)])], standby_count=2)
    assert two.standbys("t", 0) == [B] and two.standbys("t", 1) == [A]
    three = view_of([(A, [("t", 0)]), (B, []), (C, [])], standby_count=2)
    assert three.standbys("t", 0) == [B, C]


def test_a_partition_nobody_owns_is_answered_here() -> None:
    view = view_of([(A, [("t", 0)]), (B, [("t", 2)])])
    assert plan(view, "t", 4, C) == {A: [0], C: [1, 3], B: [2]}


def _rows(seed: int, n: int) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        score = rng.choice([None, *range(8)])  # few values: ties and NULLs
        out.append({"key": f"k{rng.randrange(10**6):06d}-{i}", "score": score, "partition": rng.randrange(4)})
    return out


def _top(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: (r["score"] is None, -(r["score"] or 0), r["key"]))


def _parts(rows: list[dict]) -> list[list[dict]]:
    return [[r for r in rows if r["partition"] == p] for p in range(4)]


@pytest.mark.parametrize("seed", range(5))
def test_top_n_of_the_parts_tops_is_the_top_n(seed: int) -> None:
    rows = _rows(seed, 300)
    for n in (1, 7, 50, 400):
        assert merge_top([_top(part)[:n] for part in _parts(rows)], "score", n) == _top(rows)[:n]


def test_non_finite_scores_order_as_duckdb_does() -> None:
    rows = [{"key": "a", "s": "inf"}, {"key": "b", "s": 3}, {"key": "c", "s": "nan"}, {"key": "d", "s": None},
            {"key": "e", "s": "-inf"}]
    assert [r["key"] for r in merge_top([rows[:2], rows[2:]], "s", 5)] == ["c", "a", "b", "e", "d"]


@pytest.mark.parametrize("seed", range(5))
def test_rank_is_the_sum_of_the_counts_above(seed: int) -> None:
    rows = _rows(seed, 200)
    ordered = _top(rows)
    for target in random.Random(seed).sample(rows, 20):
        ranks = []
        for part in _parts(rows):
            above = ordered.index(target)  # count above within the part: the rows before it in the order
            ranks.append(1 + sum(1 for r in ordered[:above] if r in part))
        own = ranks[target["partition"]]
        others = [r for p, r in enumerate(ranks) if p != target["partition"]]
        assert merge_rank(own, others) == ordered.index(target) + 1


@pytest.mark.parametrize("seed", range(5))
def test_a_page_of_the_parts_pages_is_the_page(seed: int) -> None:
    rows = _rows(seed, 300)
    by_key = sorted(rows, key=lambda r: r["key"])
    for limit in (1, 10, 100, 1000):
        pages = [sorted(part, key=lambda r: r["key"])[:limit] for part in _parts(rows)]
        assert merge_pages(pages, ["key"], limit) == by_key[:limit]
    windowed = [{"key": "a", "window_start": 2}, {"key": "a", "window_start": 1}, {"key": "0", "window_start": 9}]
    assert merge_pages([windowed[:1], windowed[1:]], ["key", "window_start"], 2) == [windowed[2], windowed[1]]


def test_batch_rows_follow_the_order_asked() -> None:
    rows, missing = merge_batch(["b", "x", "a", "b", "x"], [[{"key": "a", "v": 1}], [{"key": "b", "v": 2}]])
    assert rows == [{"key": "b", "v": 2}, {"key": "a", "v": 1}, {"key": "b", "v": 2}]
    assert missing == ["x"]


def test_a_merged_answer_claims_the_freshness_of_its_weakest_part() -> None:
    fresh = {"snapshot_version": 5, "staleness_seconds": 0.0}
    stale = {"snapshot_version": 5, "staleness_seconds": 3.5}
    unknown = {"snapshot_version": 5, "staleness_seconds": None}
    older = {"snapshot_version": 4, "staleness_seconds": 0.0}
    assert stalest([fresh, stale]) is stale
    assert stalest([stale, unknown, fresh]) is unknown
    assert stalest([fresh, older, unknown]) is older
