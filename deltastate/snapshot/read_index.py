"""The read index of a snapshot: point gets, multi-key gets, top-N and rank of key-value stores
without asking DuckDB.

DuckDB answers a point query in about a millisecond whatever the table's size, and top/rank scan
the column; a leaderboard wants microseconds. So publishing writes, beside each snapshot file and
from that file, per key-value store:

  <store>.rows.arrow     the store's rows sorted by key (byte order), one Arrow IPC record batch
  <store>.keys.bin       the keys' UTF-8 bytes, concatenated in that order
  <store>.keys.off.npy   offsets into keys.bin (n + 1 int64): key i is keys[off[i]:off[i+1]]
  <store>.rank.<c>.npy   row numbers in the top ordering of numeric column c (c descending, NULLs
                         last, then key ascending: the order reads.py defines)
  <store>.pos.<c>.npy    each row's 1-based rank in that ordering

Everything is memory-mapped when read, so worker processes share one copy in the page cache and the
service never holds the store as Python objects. The index belongs to one snapshot version (its
folder is named after the file) and is built before the snapshot is promoted, so a reader that
leases a version finds its index complete, or none.
"""

from __future__ import annotations

import mmap
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deltastate.changelog.layout import KEY
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
            table = table.take(pc.sort_indices(table, [(KEY, "ascending")])).combine_chunks()
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
            widths = np.diff(offsets)
            if len(widths) and widths.max() <= FIXED_KEY_BYTES and b"\x00" not in (out / f"{store.name}.keys.bin").read_bytes():
                # Short keys without NUL bytes also go into a fixed-width array: numpy pads with NULs,
                # which keeps byte order, so a vectorised searchsorted finds them.
                fixed = keys.cast(pa.binary()).to_numpy(zero_copy_only=False).astype(f"S{int(widths.max())}")
                np.save(out / f"{store.name}.keys.fixed.npy", fixed)
            rows = np.arange(table.num_rows, dtype=np.int64)
            for column in store.numeric_columns:
                values = table.column(column).to_numpy(zero_copy_only=False)
                missing = table.column(column).is_null().to_numpy(zero_copy_only=False)
                filled = np.where(missing, 0, values)
                # lexsort: the last key is the primary one. Descending values, NULLs last, then key order.
                order = np.lexsort((rows, -filled, missing)).astype(np.int64)
                position = np.empty_like(order)
                position[order] = np.arange(1, len(order) + 1, dtype=np.int64)
                np.save(out / f"{store.name}.rank.{column}.npy", order)
                np.save(out / f"{store.name}.pos.{column}.npy", position)
    finally:
        con.close()


def remove_index(snapshot_file: Path) -> None:
    shutil.rmtree(index_dir(snapshot_file), ignore_errors=True)


class StoreIndex:
    """One store's index of one snapshot version, memory-mapped."""

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
        self._folder = folder
        self._orders: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.rows = self.table.num_rows

    @staticmethod
    def _map(path: Path) -> bytes | mmap.mmap:
        if path.stat().st_size == 0:
            return b""
        with open(path, "rb") as fh:
            return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)

    def _key(self, i: int) -> bytes:
        return self._keys[int(self._offsets[i]):int(self._offsets[i + 1])]

    def find_many(self, keys: list[str]) -> list[int | None]:
        """Row numbers of keys (None when absent), one vectorised search when the keys are short."""
        import numpy as np

        if self._fixed is None or not keys:
            return [self.find(k) for k in keys]
        width = self._fixed.dtype.itemsize
        wanted = [k.encode("utf-8", errors="surrogatepass") for k in keys]
        usable = [len(w) <= width and b"\x00" not in w for w in wanted]
        probe = np.array([w if ok else b"" for w, ok in zip(wanted, usable, strict=True)], dtype=f"S{width}")
        at = np.searchsorted(self._fixed, probe).tolist()
        hits = [i < self.rows and ok and self._fixed[i] == w for i, w, ok in zip(at, wanted, usable, strict=True)]
        return [i if hit else None for i, hit in zip(at, hits, strict=True)]

    def find(self, key: str) -> int | None:
        """The row number of key, by binary search over the sorted key bytes; None when absent."""
        wanted = key.encode("utf-8", errors="surrogatepass")
        lo, hi = 0, self.rows
        while lo < hi:
            mid = (lo + hi) // 2
            if self._key(mid) < wanted:
                lo = mid + 1
            else:
                hi = mid
        return lo if lo < self.rows and self._key(lo) == wanted else None

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

    def _order(self, column: str) -> tuple[np.ndarray, np.ndarray]:
        import numpy as np

        found = self._orders.get(column)
        if found is None:
            found = (np.load(self._folder / f"{self.store}.rank.{column}.npy", mmap_mode="r").view(np.ndarray),
                     np.load(self._folder / f"{self.store}.pos.{column}.npy", mmap_mode="r").view(np.ndarray))
            self._orders[column] = found
        return found

    def top(self, column: str, n: int) -> list[dict[str, Any]]:
        order, _ = self._order(column)
        return self.rows_at(order[:n].tolist())

    def rank(self, column: str, i: int) -> int:
        _, position = self._order(column)
        return int(position[i])


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
