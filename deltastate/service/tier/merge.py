"""Parts of a scattered read -> the answer one instance over every partition gives. Pure functions
over the parts' JSON rows, in the orders query/indexed.py and query/scans.py define:
  * top: the column descending, NULLs last, then key ascending (DuckDB orders NaN above every number);
  * rank: 1 + the keys ranked above, summed over the parts (each part's rank is its count above + 1);
  * range and all: the store key ascending; a part returns at most `limit` rows, so the first `limit`
    rows of the merge are the first `limit` rows overall;
  * batchGet: the rows in the order the keys were asked, a key asked twice answers twice.
Keys compare as Python strings, which is their UTF-8 byte order, the order DuckDB and the read index use.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

Row = dict[str, Any]


def _number(value: Any) -> float:
    """A JSON number, or a non-finite float as the service writes it ("inf", "-inf", "nan")."""
    return float(value)


def top_order(by: str):
    """The sort key of a row in the top ordering of column `by`."""

    def order(row: Row) -> tuple:
        value = row.get(by)
        if value is None:
            return (1, 0, 0.0, row["key"])
        number = _number(value)
        if math.isnan(number):
            return (0, 0, 0.0, row["key"])
        return (0, 1, -number, row["key"])

    return order


def merge_top(parts: Iterable[Sequence[Row]], by: str, n: int) -> list[Row]:
    """The n best rows of the parts' top-n answers."""
    rows = [row for part in parts for row in part]
    return sorted(rows, key=top_order(by))[:n]


def merge_rank(rank_in_own_part: int, ranks_elsewhere: Iterable[int]) -> int:
    """The key's rank over every partition: its rank among its own partitions' keys plus the keys
    above it in each other part (a part answers its count above + 1)."""
    return rank_in_own_part + sum(rank - 1 for rank in ranks_elsewhere)


def merge_pages(parts: Iterable[Sequence[Row]], key_columns: Sequence[str], limit: int) -> list[Row]:
    """The first `limit` rows by store key of the parts' pages."""
    rows = [row for part in parts for row in part]
    return sorted(rows, key=lambda row: tuple(row[c] for c in key_columns))[:limit]


def merge_batch(keys: Sequence[str], parts: Iterable[Sequence[Row]]) -> tuple[list[Row], list[str]]:
    """The rows found in the order asked, and the keys missing (each once, in the order asked)."""
    found = {row["key"]: row for part in parts for row in part}
    return [found[k] for k in keys if k in found], [k for k in dict.fromkeys(keys) if k not in found]


def columns_of(bodies: Sequence[dict[str, Any]]) -> list[str]:
    """The columns of the first part that has rows (a part without rows may name none)."""
    return next((b["columns"] for b in bodies if b.get("rows")), bodies[0].get("columns", []))


def stalest(metas: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The meta of the part answered from the oldest snapshot, the stalest one among equals (unknown
    staleness counts as the stalest): a merged answer claims no more freshness than its weakest part."""

    def age(meta: dict[str, Any]) -> tuple:
        staleness = meta.get("staleness_seconds")
        return (meta.get("snapshot_version") or 0, -(math.inf if staleness is None else staleness))

    return min(metas, key=age)


__all__ = ["columns_of", "merge_batch", "merge_pages", "merge_rank", "merge_top", "stalest", "top_order"]
