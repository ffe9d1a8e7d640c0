"""Reads at `consistency=latest`: the committed answer plus the source records the stream has not
committed yet, folded by the store's own rules.

Which records a key's committed row already holds is exact per key: the row's source_offset is the
highest offset the stream folded into it (a key lives in one partition, and the stream takes a
partition in offset order), so only the key's records past it are folded on top. A key without a
committed row takes its records past the stream's committed position (the newest intake audit row:
every offset at or below it was folded or dead-lettered). That position is read before the
changelog commits the committed answer merges, so a batch committed in between is either in the
answer (its keys have rows) or past the position (folded here), never both.

Records are validated as the engine validates them (ingest/validate.py): one the engine would
dead-letter is not applied. A tombstone deletes the key; the next event starts it afresh.
Key-value stores only, and not LRU stores, whose evictions depend on other keys' records.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from deltastate.changelog.layout import EVENT_TIME, SOURCE_OFFSET
from deltastate.ingest.partitioner import partition_for
from deltastate.ingest.validate import parse_event, record_reason
from deltastate.query.errors import ParameterError
from deltastate.query.tail import Record
from deltastate.stores.backends import backend_of
from deltastate.stores.definition import StoreDefinition
from deltastate.stores.expression import evaluate, parse
from deltastate.stores.ops import combine, contribution, op


@dataclass
class LatestPosition:
    """Per source partition: the stream's committed offset and the highest offset read past it."""

    committed: dict[int, int] = field(default_factory=dict)
    read_to: dict[int, int] = field(default_factory=dict)

    def body(self) -> dict[str, dict[str, int]]:
        return {str(p): {"committed_offset": self.committed.get(p, -1), "latest_offset_applied": self.read_to.get(p, -1)}
                for p in sorted(set(self.committed) | set(self.read_to))}


def check_latest_supported(store: StoreDefinition) -> None:
    refusal = backend_of(store).latest_refusal(store)
    if refusal is not None:
        raise ParameterError("consistency", refusal)


def _typed(value: Any, type_: str) -> Any:
    if value is None:
        return None
    return float(value) if type_ == "double" else value


def fold_latest(store: StoreDefinition, row: dict[str, Any] | None, partition: int, records: list[Record],
                max_value_bytes: int) -> dict[str, Any] | None:
    """The key's committed row (None: absent) after its uncommitted records, in offset order."""
    current = None if row is None else dict(row)
    for offset, key, value in records:
        if record_reason(key, value, store, max_value_bytes) is not None:
            continue
        if value is None:
            current = None
            continue
        event = parse_event(value)
        ts = datetime.fromtimestamp(event[store.event_time_field] / 1000, tz=UTC).replace(tzinfo=None)
        if current is None:
            current = {"key": key.decode("utf-8"), EVENT_TIME: ts}  # type: ignore[union-attr]
            for agg in store.aggregations:
                wanted = store.value_field(agg.target).type
                source = None if agg.source_field is None else event.get(agg.source_field)
                current[agg.target] = _typed(contribution(agg.op, source), wanted)
        else:
            for agg in store.aggregations:
                wanted = store.value_field(agg.target).type
                source = None if agg.source_field is None else _typed(event.get(agg.source_field), wanted)
                current[agg.target] = combine(op(agg.op).combine, current.get(agg.target), contribution(agg.op, source))
            held = current.get(EVENT_TIME)
            current[EVENT_TIME] = ts if held is None else max(held, ts)
        for derived in store.derived:
            result = evaluate(parse(derived.expression), current)
            wanted = store.value_field(derived.target).type
            current[derived.target] = None if result is None else (int(result) if wanted == "long" else result)
        # Not written anywhere yet: no batch, no write time.
        current.update(source_partition=partition, source_offset=offset, batch_id=None, write_time=None)
    return current


# (partition, after) -> (records of the partition past `after`, highest offset read)
RecordsOf = Callable[[int, int], tuple[list[Record], int]]


def apply_latest(store: StoreDefinition, keys: list[str], committed: dict[str, dict[str, Any]],
                 offsets: dict[int, int], records_of: RecordsOf, partitions: int,
                 max_value_bytes: int) -> tuple[list[dict[str, Any]], LatestPosition]:
    """The latest rows of `keys` (absent keys left out, in the order asked) from their committed
    rows, the stream's committed offsets (read before those rows) and the uncommitted records."""
    position = LatestPosition(committed=dict(offsets))
    out = []
    for key in keys:
        encoded = key.encode("utf-8")
        p = partition_for(encoded, partitions)
        row = committed.get(key)
        after = row[SOURCE_OFFSET] if row is not None and row.get(SOURCE_OFFSET) is not None \
            else offsets.get(p, -1)
        records, read_to = records_of(p, after)
        # Offsets at or below the committed position are in the committed answer already.
        position.read_to[p] = max(read_to, offsets.get(p, -1))
        latest = fold_latest(store, row, p, [r for r in records if r[1] == encoded], max_value_bytes)
        if latest is not None:
            out.append(latest)
    return out, position
