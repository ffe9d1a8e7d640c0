"""The harness of the query tier test (tests/integration/test_query_tier.py): a generated
player_stats snapshot, the reference answers computed from its rows, and `deltastate serve` instances
run as processes on local ports.

The snapshot is generated (publish_generated: the production publisher, rows from here) so the
test spends its time on the tier, not on Spark; each key's source partition is its murmur2
partition, as a real run writes it. An Instance reports its process's resident memory and the read
index's share of it (from /proc), and the owners a tier reports come from the key metadata endpoint.
"""

from __future__ import annotations

import bisect
import dataclasses
import random
import subprocess
import time
from typing import Any

import httpx

from deltastate.config import Settings
from deltastate.ingest.partitioner import partition_for
from deltastate.snapshot.generated import GeneratedStore, publish_generated
from deltastate.stores import load_store
from support.cli_runs import DELTASTATE

STORE = "player_stats"
TOPIC = "game-results"  # the store's declared source: with no checkpoint, the topic it runs on
PARTITIONS = 4
# Enough rows that the read index's resident pages show beside the interpreter: the page cache maps
# files in folios of up to 2 MB, so a partition's slice of a column must be several of those.
KEYS = 900_000
WARM_EVERY = 12  # every 12th key read touches every page of every column
WARM_BATCH = 250
FIELDS = ("games", "total_score", "best_score", "last_played")


def rows_of(seed: int) -> dict[str, dict[str, int]]:
    """key -> value; total_score drawn from a small range so the leaderboard has many ties."""
    rng = random.Random(seed)
    out = {}
    for i in range(KEYS):
        games = rng.randint(1, 40)
        out[f"player-{i:06d}"] = {"games": games, "total_score": rng.randint(0, 900), "best_score": rng.randint(0, 99),
                                  "last_played": 1_700_000_000_000 + rng.randint(0, 10**8)}
    return out


def publish(settings: Settings, state: dict[str, dict[str, int]]) -> None:
    from datetime import datetime

    import pyarrow as pa

    keys = sorted(state)
    stamp = [datetime(2026, 1, 1)] * len(keys)
    table = pa.table({"key": keys, **{f: [state[k][f] for k in keys] for f in FIELDS},
                      "source_partition": pa.array([partition_for(k, PARTITIONS) for k in keys], pa.int32()),
                      "source_offset": list(range(len(keys))), "batch_id": [0] * len(keys),
                      "event_time": stamp, "write_time": stamp})

    def fill(con) -> None:
        con.register("_rows", table)
        con.execute(f"INSERT INTO {STORE} SELECT * FROM _rows")

    publish_generated(settings, [GeneratedStore(load_store(settings, STORE), fill)])


# -- the reference ---------------------------------------------------------------------------------
class Reference:
    def __init__(self, state: dict[str, dict[str, int]]) -> None:
        self.state = state
        self.keys = sorted(state)
        self.order = sorted(state, key=lambda k: (-state[k]["total_score"], k))
        self.rank_of = {k: i + 1 for i, k in enumerate(self.order)}

    def top(self, n: int) -> list[tuple[str, int]]:
        return [(k, self.state[k]["total_score"]) for k in self.order[:n]]

    def range(self, low: str, high: str) -> list[str]:
        return self.keys[bisect.bisect_left(self.keys, low):bisect.bisect_right(self.keys, high)]


def values(row: dict[str, Any]) -> dict[str, int]:
    return {f: row[f] for f in FIELDS}


# -- the instances ---------------------------------------------------------------------------------
@dataclasses.dataclass
class Instance:
    url: str
    port: int
    proc: subprocess.Popen | None = None

    def index_mb(self) -> float:
        """Resident MB of the snapshot's read index files in the process (from /proc/PID/smaps)."""
        total, mapped = 0, None
        with open(f"/proc/{self.proc.pid}/smaps") as fh:
            for line in fh:
                fields = line.split()
                if fields and "-" in fields[0] and len(fields) >= 5:
                    mapped = fields[5] if len(fields) > 5 else None
                elif fields and fields[0] == "Rss:" and mapped is not None and ".index/" in mapped:
                    total += int(fields[1])
        return total / 1024

    def rss_mb(self) -> float:
        assert self.proc is not None
        with open(f"/proc/{self.proc.pid}/status") as fh:
            kb = next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))
        return kb / 1024


def start(instance: Instance, env: dict[str, str], log_dir) -> None:
    log = open(log_dir / f"serve-{instance.port}.log", "ab")  # noqa: SIM115 - the process owns it
    instance.proc = subprocess.Popen([DELTASTATE, "serve", "--port", str(instance.port), "--advertise", instance.url,
                                      "--log-level", "warning"], env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert instance.proc.poll() is None, (log_dir / f"serve-{instance.port}.log").read_text()[-3000:]
        try:
            if httpx.get(instance.url + "/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{instance.url} did not start")


def owners(url: str, reference: Reference) -> dict[int, tuple[str | None, list[str]]]:
    """partition -> (active host, standby hosts), as the instance at `url` reports them."""
    out: dict[int, tuple[str | None, list[str]]] = {}
    for key in reference.keys:
        p = partition_for(key, PARTITIONS)
        if p not in out:
            meta = httpx.get(f"{url}/stores/{STORE}/keys/{key}/metadata", timeout=5).json()
            assert meta["partition"] == p and meta["partitions"] == PARTITIONS and meta["topic"] == TOPIC, meta
            out[p] = (meta["active_host"], meta["standby_hosts"])
        if len(out) == PARTITIONS:
            return out
    raise AssertionError("the keys do not cover every partition")


def wait_for_view(instances: list[Instance], members: set[str], reference: Reference, timeout: float = 60) -> dict:
    """Until every instance reports the same owners, all among `members`, every member owning a
    partition and every partition a standby (there are 2+ members); returns that view."""
    deadline = time.monotonic() + timeout
    seen = None
    while time.monotonic() < deadline:
        seen = [owners(i.url, reference) for i in instances]
        view = seen[0]
        actives = {a for a, _ in view.values()}
        if all(s == view for s in seen) and actives == members and \
                all(s and set(s) <= members and a not in s for a, s in view.values()):
            return view
        time.sleep(0.3)
    raise AssertionError(f"the tier did not settle on {sorted(members)}: {seen}")


def warm(urls: list[str], reference: Reference) -> None:
    """Keys all over the store read (small batches, spread over the instances: the Python heap's
    high-water mark follows the largest answer an instance builds) and the leaderboard, so resident
    memory counts what point reads touch."""
    keys = reference.keys[::WARM_EVERY]
    with httpx.Client(timeout=60) as http:
        for n, i in enumerate(range(0, len(keys), WARM_BATCH)):
            url = urls[n % len(urls)]
            r = http.post(f"{url}/stores/{STORE}/keys:batchGet", json={"keys": keys[i:i + WARM_BATCH]})
            assert r.status_code == 200 and not r.json()["missing"], r.text[:300]
        assert http.get(f"{urls[0]}/stores/{STORE}/top", params={"n": 100}).status_code == 200
