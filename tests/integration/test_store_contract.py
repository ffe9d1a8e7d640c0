"""One contract, every store type: what Kafka Streams users may rely on whatever the store.

It runs once per store backend (stores/backends/): key-value (once per state provider, rocksdb and
memory), LRU key-value, key-value without changelog, window and session, and a kind the tests
register themselves (tests/support/counting_backend.py) to show a new kind needs nothing else. pulse_counts, the other
window store, shares
trade_stats' code path; its null-value deletes and checkouts are compared with the reference in
test_windowed_stores.py.

- put/get: an event creates the key's entry, counted once;
- delete: a null value removes every entry of the key; later events start afresh;
- offset order: event, delete, event for one key in ONE micro-batch leaves exactly the last event;
- exactly once: a run with nothing new writes nothing; (batch, store key) is unique in the changelog
  (a store without changelog: nothing new adds no audit row, and each batch is audited once);
- resume: a run starts from its lineage's newest audit row, as if it had summed the whole history.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import uuid
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field

import pytest
import yaml
from support.counting_backend import COUNTING_BACKEND, counting_backend_registered
from support.local_infra import make_home
from support.store_checks import assert_resumes_from_newest_audit_row

from deltastate.changelog.layout import CHANGELOG, INTAKE, store_key_columns
from deltastate.config import Settings
from deltastate.engine import run_store
from deltastate.ingest.producer import ensure_topic, produce_records
from deltastate.query import Queries
from deltastate.snapshot import publish_snapshot
from deltastate.stores import list_stores, load_store
from deltastate.stores.backends import backend_of, backends

pytestmark = pytest.mark.integration
T0 = 1_700_000_000_000


def event(store: str, key: str, ts: int) -> bytes:
    doc = {
        "player_stats": {"player_id": key, "game_id": f"g{ts}", "score": 7, "ts": ts},
        "trade_stats": {"symbol": key, "price": 10.5, "qty": 3, "ts": ts},
        "pulse_counts": {"patient_id": key, "ts": ts},
        "user_sessions": {"user_id": key, "page": "/p", "ts": ts},
    }[store]
    return json.dumps(doc).encode()


# The value field that counts events, per store.
COUNTER = {"player_stats": "games", "trade_stats": "count", "pulse_counts": "beats", "user_sessions": "event_count"}


def entries(settings, store: str, key: str) -> list[dict]:
    queries = Queries(settings)
    backend = backend_of(load_store(settings, store))
    if backend.answers("sessions"):
        return queries.sessions(store, key).rows
    if backend.answers("windows"):
        return queries.windows(store, key).rows
    return queries.sql(f"SELECT * FROM {store} WHERE key = '{key}'").rows


ONE_STORE_PER_TYPE = ["player_stats", "trade_stats", "user_sessions"]
# The backend each key-value variant must select (the others: the backend named after the store's type).
BACKEND_KIND = {"rocksdb": "key_value", "memory": "key_value"}
# Every backend once: player_stats as each key-value variant (the store file changed as a user would
# write it), and the key-value store once more on the other state provider.
CONTRACT_RUNS = [
    ("player_stats", "rocksdb", {"state": {"provider": "rocksdb"}}),
    ("player_stats", "memory", {"state": {"provider": "memory"}}),
    # Neither takes migrations (seeded from a complete changelog), so their files drop player_stats' own.
    ("player_stats", "lru", {"max_entries": 1000, "migrations": []}),
    ("player_stats", "unlogged", {"changelog": {"enabled": False}, "migrations": []}),
    # A kind registered by the tests alone (tests/support/counting_backend.py).
    ("player_stats", "key_count", {"type": "key_count"}),
    ("trade_stats", None, {}),
    ("user_sessions", None, {}),
]


@dataclass
class ContractRun:
    """What one store showed along the contract's scenario; each test asserts one behaviour of it."""

    store: str
    settings: Settings
    first: tuple[list[dict], list[dict]] = ([], [])  # a's and b's entries after the first batch
    after_delete: tuple[list[dict], list[dict]] = ([], [])
    changelog_rows: tuple[int, int] = (0, 0)  # before and after a run with nothing new
    repeated_keys: int = -1  # (epoch, batch_id, store key) groups with more than one record
    restarted: list[dict] = field(default_factory=list)  # a's entries after an event past its delete


@pytest.fixture(scope="class", params=CONTRACT_RUNS, ids=[f"{s}-{v}" if v else s for s, v, _ in CONTRACT_RUNS])
def contract(request, broker, spark, session_settings, tmp_path_factory) -> Iterator[ContractRun]:
    store, variant, changes = request.param
    with counting_backend_registered() if variant == "key_count" else nullcontext():
        yield _contract_run(store, variant, changes, broker, spark, session_settings, tmp_path_factory)


def _contract_run(store, variant, changes, broker, spark, session_settings, tmp_path_factory) -> ContractRun:
    home = make_home(tmp_path_factory.mktemp(f"contract-{store}"))
    settings = dataclasses.replace(session_settings, home=home, storage_root=str(home / "data"))
    if changes:  # the store's definition with this variant's keys
        schemas = home / "schemas"
        shutil.copytree(session_settings.schemas_dir, schemas)
        definition = yaml.safe_load((schemas / "stores" / f"{store}.yaml").read_text())
        definition.update(changes)
        (schemas / "stores" / f"{store}.yaml").write_text(yaml.safe_dump(definition))
        settings = dataclasses.replace(settings, schemas_dir=schemas)
    definition = load_store(settings, store)
    assert backend_of(definition).kind == (BACKEND_KIND.get(variant, variant) if variant else definition.type)
    if "state" in changes:
        assert definition.state.provider == changes["state"]["provider"]
    topic = f"t-{uuid.uuid4().hex[:10]}"
    assert ensure_topic(broker, topic, 4)
    run = ContractRun(store, settings)
    a, b = f"{store}-a", f"{store}-b"

    def batch(records) -> None:
        assert produce_records(broker, topic, records).delivered == len(records)
        run_store(settings, store, once=True, topic=topic)
        publish_snapshot(spark, settings, [load_store(settings, store)])

    # One micro-batch: a gets one event; b gets event, delete, event (offset order must hold).
    batch([(a.encode(), event(store, a, T0)), (b.encode(), event(store, b, T0)), (b.encode(), None),
           (b.encode(), event(store, b, T0 + 100))])
    run.first = (entries(settings, store, a), entries(settings, store, b))
    batch([(a.encode(), None)])  # a later delete of a alone
    run.after_delete = (entries(settings, store, a), entries(settings, store, b))
    # What the store writes per batch: its changelog, or without one the batch's audit row.
    logged = backend_of(load_store(settings, store)).has_changelog
    written = settings.table_path(store, CHANGELOG if logged else INTAKE)
    before = spark.read.format("delta").load(written).count()
    run_store(settings, store, once=True, topic=topic)  # nothing new
    after = spark.read.format("delta").load(written)
    run.changelog_rows = (before, after.count())
    keys = ["epoch", "batch_id", *store_key_columns(load_store(settings, store))] if logged else ["lineage_id", "batch_id"]
    run.repeated_keys = after.groupBy(*keys).count().where("count > 1").count()
    batch([(a.encode(), event(store, a, T0 + 200))])
    run.restarted = entries(settings, store, a)
    return run


def counts(rows: list[dict], store: str) -> list[int]:
    return [r[COUNTER[store]] for r in rows]


class TestStoreContract:
    def test_one_store_per_type_covers_every_declared_type(self, make_settings):
        settings = make_settings()
        types = [load_store(settings, s).type for s in ONE_STORE_PER_TYPE]
        assert sorted(types) == sorted({load_store(settings, s).type for s in list_stores(settings)})

    def test_the_runs_cover_every_backend(self, make_settings):
        settings = make_settings()
        kinds = {BACKEND_KIND.get(v, v) if v else backend_of(load_store(settings, s)).kind for s, v, _ in CONTRACT_RUNS}
        assert kinds == {b.kind for b in backends()} | {COUNTING_BACKEND.kind}

    def test_put_creates_the_entry_counted_once(self, contract):
        got_a, _ = contract.first
        assert counts(got_a, contract.store) and all(n == 1 for n in counts(got_a, contract.store))

    def test_event_delete_event_in_one_batch_leaves_the_last_event(self, contract):
        _, got_b = contract.first
        assert counts(got_b, contract.store) and all(n == 1 for n in counts(got_b, contract.store))

    def test_delete_removes_every_entry_of_the_key(self, contract):
        assert contract.after_delete[0] == []

    def test_delete_leaves_other_keys_untouched(self, contract):
        assert counts(contract.after_delete[1], contract.store) == counts(contract.first[1], contract.store)

    def test_a_run_with_nothing_new_writes_nothing(self, contract):
        before, after = contract.changelog_rows
        assert before > 0 and after == before

    def test_batch_and_store_key_are_unique_in_the_changelog(self, contract):
        assert contract.repeated_keys == 0

    def test_an_event_after_a_delete_starts_afresh(self, contract):
        assert contract.restarted and all(n == 1 for n in counts(contract.restarted, contract.store))

    def test_a_run_resumes_from_the_newest_audit_row(self, contract, spark, tmp_path):
        # Last: it moves older audit files aside and back.
        assert_resumes_from_newest_audit_row(spark, contract.settings, contract.store, tmp_path / "away")
