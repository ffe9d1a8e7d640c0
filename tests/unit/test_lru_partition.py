"""The LRU store's partition update (engine/keyvalue/lru.py) against the independent reference
(support.reference.expected_lru), over randomized streams with repeated keys, tombstones and dead
letters, cut into micro-batches at random points. The same function runs in Spark in
tests/integration/test_lru_store.py."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pandas as pd
import pytest
from support.reference import Record, category, expected_lru

from deltastate.changelog.layout import REASON_EVICTED
from deltastate.engine.keyvalue.fold import EVENT_TIME_SLOT, FoldSpec
from deltastate.engine.keyvalue.lru import _partition_update, _slot_combines
from deltastate.engine.keyvalue.plan import AUDIT_PARTITION
from deltastate.stores.parse import parse_store

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


class FakeState:
    """GroupState's surface the update uses: exists, get, update."""

    def __init__(self) -> None:
        self.value: tuple | None = None

    @property
    def exists(self) -> bool:
        return self.value is not None

    @property
    def get(self) -> tuple:
        assert self.value is not None
        return self.value

    def update(self, value: tuple) -> None:
        self.value = tuple(value)


def store_with(max_entries: int, tmp_path: Path):
    import yaml

    raw = yaml.safe_load((SCHEMAS / "stores" / "player_stats.yaml").read_text())
    raw.update(name="players_lru", max_entries=max_entries)
    raw.pop("migrations")  # an LRU store cannot be migrated
    path = tmp_path / "players_lru.yaml"
    path.write_text(yaml.safe_dump(raw))
    return parse_store(SCHEMAS, "players_lru", path)


def input_frame(store, records: list[Record]) -> pd.DataFrame:
    """The rows lru._input_rows gives Spark's group function, computed here from the raw records:
    per aggregation (in the store's order) and then the event time, a value and its null flag."""
    rows = []
    for rec in records:
        ok = category(rec.key, rec.value, 65_536) is None
        doc = json.loads(rec.value) if ok and rec.value is not None else {}
        values = [(1, False) if a.op == "count" else (doc.get(a.source_field) or 0, a.source_field not in doc)
                  for a in store.aggregations] + [(doc.get("ts") or 0, "ts" not in doc)]
        row = {"partition": rec.partition, "offset": rec.offset, "kafka_us": 1_000 * rec.offset, "seed": False,
               "store_key": rec.key.decode() if ok else None, "valid": ok, "is_tombstone": rec.value is None}
        for i, (v, z) in enumerate(values):
            row[f"v{i}"], row[f"z{i}"] = v, z
        rows.append(row)
    return pd.DataFrame(rows)


def random_stream(rng: random.Random, partitions: int, players: int, length: int) -> list[Record]:
    offsets = [0] * partitions
    out = []
    for _ in range(length):
        player = f"p{rng.randrange(players)}"
        p = int(player[1:]) % partitions
        roll = rng.random()
        if roll < 0.08:
            value = None
        elif roll < 0.12:
            value = b"{not json"
        else:
            value = json.dumps({"player_id": player, "game_id": "g", "score": rng.randrange(1000),
                                "ts": rng.randrange(10**9)}).encode()
        out.append(Record(p, offsets[p], player.encode(), value))
        offsets[p] += 1
    return out


@pytest.mark.parametrize("seed", range(40))
def test_partition_update_equals_the_reference(seed: int, tmp_path: Path) -> None:
    rng = random.Random(seed)
    partitions = 4
    max_entries = rng.choice([4, 5, 9, 16, 40])
    store = store_with(max_entries, tmp_path)
    update = _partition_update(store, _slot_combines(store, FoldSpec("f", (*(a.target for a in store.aggregations), EVENT_TIME_SLOT))))
    records = random_stream(rng, partitions, players=rng.choice([6, 20, 60]), length=rng.randrange(50, 400))
    ref = expected_lru(records, store.lru_capacity)

    states = {p: FakeState() for p in range(partitions)}
    latest: dict[str, dict] = {}  # changelog: latest record per key
    audit: dict[int, dict] = {}
    for p in range(partitions):
        mine = [r for r in records if r.partition == p]
        cuts = sorted(rng.sample(range(len(mine) + 1), k=min(3, len(mine) + 1)))
        for lo, hi in zip([0, *cuts], [*cuts, len(mine)], strict=True):
            if lo == hi:
                continue
            batch = input_frame(store, mine[lo:hi]).sample(frac=1.0, random_state=rng.randrange(1000))  # arrival order
            for out in update((p,), iter([batch]), states[p]):
                for row in out.to_dict("records"):
                    if pd.notna(row[AUDIT_PARTITION]):
                        audit[p] = row
                    else:
                        latest[row["store_key"]] = row

    fields = [a.target for a in store.aggregations]
    live = {k: {f: int(row[f"r{i}"]) for i, f in enumerate(fields)} for k, row in latest.items() if row["n"] > 0}
    assert live == ref.state
    evicted = {k for k, row in latest.items() if row["reason"] == REASON_EVICTED}
    assert evicted == ref.evicted
    for p in range(partitions):
        assert sum(1 for k in live if int(k[1:]) % partitions == p) <= store.lru_capacity(p)
    totals = {name: sum(int(a[name]) for a in audit.values())
              for name in ("records_in", "applied", "dead_lettered", "tombstones")}
    assert totals == {"records_in": ref.records_in, "applied": ref.applied, "dead_lettered": ref.dead_lettered,
                      "tombstones": ref.tombstones}


def test_capacity_splits_max_entries_over_the_partitions(tmp_path: Path) -> None:
    store = store_with(10, tmp_path)
    assert [store.lru_capacity(p) for p in range(4)] == [3, 3, 2, 2]
    assert sum(store.lru_capacity(p) for p in range(4)) == 10
