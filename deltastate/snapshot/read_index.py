"""The read index of a snapshot: point gets, multi-key gets, top-N and rank of key-value stores
without asking DuckDB.

DuckDB answers a point query in about a millisecond whatever the table's size, and top/rank scan
the column; a leaderboard wants microseconds. So publishing writes, beside each snapshot file and
from that file, per key-value store:

  <store>.rows.arrow     the store's rows by source partition, then key (byte order) within each
                         partition, one Arrow IPC record batch
  <store>.parts.npy      partition p's rows are rows[parts[p]:parts[p+1]] (max partition + 2 int64)
  <store>.keys.bin       the keys' UTF-8 bytes, concatenated in that order
  <store>.keys.off.npy   offsets into keys.bin (n + 1 int64): key i is keys[off[i]:off[i+1]]
  <store>.keys.fixed.npy the keys as one fixed-width array (when they are short), in row order;
  <store>.keys.sorted.npy  and in key order over every partition, with
  <store>.keys.rows.npy    each one's row number
  <store>.rank.<c>.npy   row numbers in the top ordering of numeric column c (c descending, NULLs
                         last, then key ascending: the order query/indexed.py defines)
  <store>.pos.<c>.npy    each row's 1-based rank in that ordering
  <store>.prank.<c>.npy  per partition, its row numbers in that ordering (partition p's at
                         parts[p]:parts[p+1])

Everything is memory-mapped when read, so worker processes share one copy in the page cache and the
service never holds the store as Python objects. Rows lie partition by partition so that an
instance of a query tier, answering for some partitions only, reads (and keeps resident) only
their pages: every read takes the partitions it covers (None: all). The index belongs to one
snapshot version (its folder is named after the file) and is built before the snapshot is promoted,
so a reader that leases a version finds its index complete, or none.
"""

from __future__ import annotations

import bisect
import mmap
import shutil
from collections.abc import Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deltastate.changelog.layout import KEY, SOURCE_PARTITION
from deltastate.snapshot.catalog import INDEX_SUFFIX
from deltastate.stores.backends import backend_of

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

    from deltastate.stores.definition import StoreDefinition

FIXED_KEY_BYTES = 64


def index_dir(snapshot_file: Path) -> Path:
    return snapshot_file.with_name(snapshot_file.name + INDEX_SUFFIX)


def build_read_index(snapshot_file: Path, stores: list[StoreDefinition], out: Path) -> None:
    """Writes the index of every key-value store of `stores` held by the snapshot file into `out`."""
    import duckdb
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    out.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect(str(snapshot_file), read_only=True)
    try:
        held = {row[0] for row in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        for store in stores:
            if not backend_of(store).read_index or store.name not in held:
                continue
            table = con.sql(f'SELECT * FROM "{store.name}"').to_arrow_table()
            # One sort by key; rows then go partition by partition, keeping key order within each (a
            # stable sort of small integers). A row without a source partition (none is written so)
            # counts as partition 0's.
            by_key_in = pc.sort_indices(table, [(KEY, "ascending")]).to_numpy().astype(np.int64)
            sources = pc.fill_null(table.column(SOURCE_PARTITION), 0).to_numpy(zero_copy_only=False).astype(np.int64)
            key_rank = np.argsort(_small(sources[by_key_in]), kind="stable")  # new row -> its rank in key order
            table = table.take(pa.Array.from_buffers(pa.int64(), len(key_rank),
                                                     [None, pa.py_buffer(by_key_in[key_rank])])).combine_chunks()
            partition = sources[by_key_in[key_rank]]
            counts = np.bincount(partition) if len(partition) else np.zeros(0, dtype=np.int64)
            np.save(out / f"{store.name}.parts.npy", np.concatenate([[0], np.cumsum(counts)]).astype(np.int64))
            with pa.OSFile(str(out / f"{store.name}.rows.arrow"), "wb") as sink:
                with pa.ipc.new_file(sink, table.schema) as writer:
                    writer.write_table(table, max_chunksize=max(1, table.num_rows))
            keys = table.column(KEY).chunks[0] if table.num_rows else pa.array([], pa.string())
            keys = keys.cast(pa.large_string())
            offsets = np.frombuffer(keys.buffers()[1], dtype=np.int64)[keys.offset:keys.offset + len(keys) + 1]
            data = keys.buffers()[2]
            start, end = int(offsets[0]), int(offsets[-1])
            (out / f"{store.name}.keys.bin").write_bytes(b"" if data is None else data.to_pybytes()[start:end])
            np.save(out / f"{store.name}.keys.off.npy", (offsets - start).astype(np.int64))
            key_order = np.empty_like(key_rank)  # rows by key
            key_order[key_rank] = np.arange(len(key_rank), dtype=np.int64)
            widths = np.diff(offsets)
            if len(widths) and widths.max() <= FIXED_KEY_BYTES and b"\x00" not in (out / f"{store.name}.keys.bin").read_bytes():
                # Short keys without NUL bytes also go into fixed-width arrays: numpy pads with NULs,
                # which keeps byte order, so a vectorised searchsorted finds them. In row order (a
                # search within some partitions), and in key order over all of them (one search).
                fixed = keys.cast(pa.binary()).to_numpy(zero_copy_only=False).astype(f"S{int(widths.max())}")
                np.save(out / f"{store.name}.keys.fixed.npy", fixed)
                np.save(out / f"{store.name}.keys.sorted.npy", fixed[key_order])
                np.save(out / f"{store.name}.keys.rows.npy", key_order)
            for column in store.numeric_columns:
                values = table.column(column).to_numpy(zero_copy_only=False)
                missing = table.column(column).is_null().to_numpy(zero_copy_only=False)
                filled = np.where(missing, 0, values)
                # lexsort: the last key is the primary one. Descending values, NULLs last, then key order.
                order = np.lexsort((key_rank, -filled, missing)).astype(np.int64)
                position = np.empty_like(order)
                position[order] = np.arange(1, len(order) + 1, dtype=np.int64)
                np.save(out / f"{store.name}.rank.{column}.npy", order)
                np.save(out / f"{store.name}.pos.{column}.npy", position)
                # Each partition's rows in that order: a stable sort of the order by partition.
                np.save(out / f"{store.name}.prank.{column}.npy",
                        order[np.argsort(_small(partition[order]), kind="stable")])
    finally:
        con.close()


def _small(values: np.ndarray) -> np.ndarray:
    """Partition numbers as 16-bit integers when they fit: numpy's stable sort of those is a radix sort."""
    import numpy as np

    return values.astype(np.int16) if len(values) and 0 <= values.min() and values.max() < 2**15 else values


def remove_index(snapshot_file: Path) -> None:
    shutil.rmtree(index_dir(snapshot_file), ignore_errors=True)


class StoreIndex:
    """One store's index of one snapshot version, memory-mapped. Reads take `partitions`: the source
    partitions whose rows they cover (None: every one)."""

    def __init__(self, folder: Path, store: str) -> None:
        import numpy as np
        import pyarrow as pa

        self.store = store
        self.table: pa.Table = pa.ipc.open_file(pa.memory_map(str(folder / f"{store}.rows.arrow"))).read_all()
        self.columns = list(self.table.column_names)
        self._getters = [_getter(self.table.column(c)) for c in self.columns] if self.table.num_rows else []
        # A plain ndarray view of the map: indexing a np.memmap costs more per element.
        self._offsets: np.ndarray = np.load(folder / f"{store}.keys.off.npy", mmap_mode="r").view(np.ndarray)
        keys_path = folder / f"{store}.keys.bin"
        self._keys = self._map(keys_path)
        fixed = folder / f"{store}.keys.fixed.npy"
        self._fixed: np.ndarray | None = np.load(fixed, mmap_mode="r").view(np.ndarray) if fixed.is_file() else None
        ordered, rows_of = folder / f"{store}.keys.sorted.npy", folder / f"{store}.keys.rows.npy"
        self._sorted: tuple[np.ndarray, np.ndarray] | None = (
            (np.load(ordered, mmap_mode="r").view(np.ndarray), np.load(rows_of, mmap_mode="r").view(np.ndarray))
            if ordered.is_file() else None)
        self._folder = folder
        self._orders: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self.rows = self.table.num_rows
        parts = folder / f"{store}.parts.npy"
        # An index written before rows were laid out by partition is one key-sorted range; it answers
        # reads over every partition only (query/source.py asks DuckDB for the others).
        self.partitioned = parts.is_file()
        bounds = np.load(parts).tolist() if self.partitioned else [0, self.rows]
        # partition -> (first row, end): each range sorted by key.
        self._parts = {p: (lo, hi) for p, (lo, hi) in enumerate(zip(bounds, bounds[1:], strict=False)) if hi > lo}

    @staticmethod
    def _map(path: Path) -> bytes | mmap.mmap:
        if path.stat().st_size == 0:
            return b""
        with open(path, "rb") as fh:
            return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)

    def _key(self, i: int) -> bytes:
        return self._keys[int(self._offsets[i]):int(self._offsets[i + 1])]

    def _ranges(self, partitions: Collection[int] | None) -> list[tuple[int, int]]:
        if partitions is None:
            return list(self._parts.values())
        return [self._parts[p] for p in sorted(partitions) if p in self._parts]

    def find_many(self, keys: list[str], partitions: Collection[int] | None = None) -> list[int | None]:
        """Row numbers of keys (None when absent): searched partition by partition, each search over
        the keys not found yet (vectorised, this costs less than hashing every key to its partition)."""
        wanted = [k.encode("utf-8", errors="surrogatepass") for k in keys]
        if partitions is None and self._sorted is not None:
            return self._find_sorted(wanted)
        found: list[int | None] = [None] * len(keys)
        asked = list(range(len(keys)))
        for bounds in self._ranges(partitions):
            self._search(bounds, wanted, asked, found)
            asked = [i for i in asked if found[i] is None]
            if not asked:
                break
        return found

    def _find_sorted(self, wanted: list[bytes]) -> list[int | None]:
        """Every partition at once: one vectorised search of the keys in key order."""
        import numpy as np

        ordered, rows_of = self._sorted  # type: ignore[misc]
        width = ordered.dtype.itemsize
        if len(wanted) == 1:  # a point get: scalar calls cost less than building arrays
            w = wanted[0]
            i = int(ordered.searchsorted(w)) if len(w) <= width and b"\x00" not in w else self.rows
            return [int(rows_of[i]) if i < self.rows and ordered[i] == w else None]
        usable = [len(w) <= width and b"\x00" not in w for w in wanted]
        probe = np.array([w if ok else b"" for w, ok in zip(wanted, usable, strict=True)], dtype=f"S{width}")
        at = np.searchsorted(ordered, probe).tolist()
        hits = [i < self.rows and ok and ordered[i] == w for i, w, ok in zip(at, wanted, usable, strict=True)]
        rows = iter(rows_of[[i for i, hit in zip(at, hits, strict=True) if hit]].tolist())
        return [next(rows) if hit else None for hit in hits]

    def _search(self, bounds: tuple[int, int], wanted: list[bytes], asked: list[int], found: list[int | None]) -> None:
        """Fill found[i] for the asked keys present in rows lo..hi (one vectorised search when the keys
        are short, a binary search each otherwise)."""
        import numpy as np

        lo, hi = bounds
        if self._fixed is None:
            for i in asked:
                found[i] = self._find_in(lo, hi, wanted[i])
            return
        width = self._fixed.dtype.itemsize
        usable = [len(wanted[i]) <= width and b"\x00" not in wanted[i] for i in asked]
        probe = np.array([wanted[i] if ok else b"" for i, ok in zip(asked, usable, strict=True)], dtype=f"S{width}")
        segment = self._fixed[lo:hi]
        at = np.searchsorted(segment, probe).tolist()
        for i, j, ok in zip(asked, at, usable, strict=True):
            if ok and j < hi - lo and segment[j] == wanted[i]:
                found[i] = lo + j

    def _find_in(self, lo: int, hi: int, wanted: bytes) -> int | None:
        start, end = lo, hi
        while start < end:
            mid = (start + end) // 2
            if self._key(mid) < wanted:
                start = mid + 1
            else:
                end = mid
        return start if start < hi and self._key(start) == wanted else None

    def find(self, key: str, partitions: Collection[int] | None = None) -> int | None:
        """The row number of key, or None when absent."""
        return self.find_many([key], partitions)[0]

    def row(self, i: int) -> dict[str, Any]:
        return {name: get(i) for name, get in zip(self.columns, self._getters, strict=True)}

    def rows_at(self, positions: list[int]) -> list[dict[str, Any]]:
        """Rows by row number, in the order given, converted in one Arrow call."""
        import pyarrow as pa

        if not positions:
            return []
        import numpy as np

        # From a buffer, not pa.array(): pa.array() looks for pandas, and a CLI read must not import it.
        indices = np.asarray(positions, dtype=np.int64)
        taken = self.table.take(pa.Array.from_buffers(pa.int64(), len(indices), [None, pa.py_buffer(indices)]))
        columns = [_python_values(taken.column(i).combine_chunks()) for i in range(taken.num_columns)]
        return [dict(zip(self.columns, values, strict=True)) for values in zip(*columns, strict=True)]

    def _order(self, column: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        import numpy as np

        found = self._orders.get(column)
        if found is None:
            paths = [self._folder / f"{self.store}.{kind}.{column}.npy" for kind in ("rank", "pos", "prank")]
            found = tuple(np.load(path, mmap_mode="r").view(np.ndarray) if path.is_file() else None for path in paths)
            self._orders[column] = found  # type: ignore[assignment]
        return found  # type: ignore[return-value]

    def top(self, column: str, n: int, partitions: Collection[int] | None = None) -> list[dict[str, Any]]:
        import numpy as np

        order, position, by_partition = self._order(column)
        if partitions is None:
            return self.rows_at(order[:n].tolist())
        # The first n of each partition's ordering, then the first n of those by overall rank.
        heads = [by_partition[lo:min(hi, lo + n)] for lo, hi in self._ranges(partitions)]
        if not heads:
            return []
        candidates = np.concatenate(heads)
        return self.rows_at(candidates[np.argsort(position[candidates], kind="stable")][:n].tolist())

    def rank(self, column: str, i: int) -> int:
        _, position, _ = self._order(column)
        return int(position[i])

    def count_above(self, column: str, value: Any, key: str, partitions: Collection[int] | None = None) -> int:
        """How many rows of the partitions rank above a row (value, key) in the top ordering: a binary
        search in each partition's ordering, touching a few of its rows."""
        _, _, by_partition = self._order(column)
        get = self._getters[self.columns.index(column)] if self._getters else None
        wanted = _top_key(value, key.encode("utf-8", errors="surrogatepass"))
        total = 0
        for lo, hi in self._ranges(partitions):
            total += bisect.bisect_left(range(lo, hi), wanted,
                                        key=lambda j: _top_key(get(int(by_partition[j])),  # type: ignore[misc]
                                                               self._key(int(by_partition[j]))))
        return total


def _top_key(value: Any, key: bytes) -> tuple:
    """A row's place in the top ordering, as a tuple that sorts the same way."""
    return (1, 0.0, key) if value is None else (0, -value, key)


def _plain(array: pa.Array) -> np.ndarray | None:
    """A zero-copy numpy view of an integer, float or (naive, microsecond) timestamp array without
    nulls; None for other arrays. Read from the Arrow buffer with numpy alone: pyarrow's to_numpy()
    imports pandas, which a CLI read must not pay for."""
    import numpy as np
    import pyarrow as pa

    kind = array.type
    if array.null_count:
        return None
    if pa.types.is_integer(kind):
        dtype = np.dtype(f"{'i' if pa.types.is_signed_integer(kind) else 'u'}{kind.bit_width // 8}")
    elif pa.types.is_floating(kind):
        dtype = np.dtype(f"f{kind.bit_width // 8}")
    elif pa.types.is_timestamp(kind) and kind.tz is None and kind.unit == "us":
        dtype = np.dtype("datetime64[us]")
    else:
        return None
    return np.frombuffer(array.buffers()[1], dtype=dtype, count=len(array), offset=array.offset * dtype.itemsize)


def _getter(column: pa.ChunkedArray) -> Callable[[int], Any]:
    """Value i of a column as Python, as Arrow's as_py() gives it; through a zero-copy numpy view
    of the mapped buffer for integers, floats and timestamps without nulls (much cheaper per value)."""
    # The index holds one record batch: its one chunk is a view of the mapped file (combine_chunks
    # would copy the whole column into memory).
    array = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    values = _plain(array)
    if values is not None:
        return lambda i: values[i].item()
    return lambda i: array[i].as_py()


def _python_values(array: pa.Array) -> list[Any]:
    """An Arrow array as Python values, as to_pylist() gives them, through numpy where that is
    faster (integers, floats and timestamps without nulls)."""
    values = _plain(array)
    if values is None:
        return array.to_pylist()
    return values.astype(object).tolist() if values.dtype.kind == "M" else values.tolist()


def load_index(snapshot_file: Path, store: str) -> StoreIndex | None:
    """The store's index of this snapshot version, or None when the version has none for it."""
    folder = index_dir(snapshot_file)
    if not (folder / f"{store}.rows.arrow").is_file():
        return None
    return StoreIndex(folder, store)
