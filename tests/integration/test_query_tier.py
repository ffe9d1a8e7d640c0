"""Three `deltastate serve` instances (new processes, local ports) form a query tier over one
published player_stats snapshot through the real broker's consumer-group protocol.

Reads at every instance equal a reference computed here from the rows published (get, batchGet,
range pages, all, top with ties, rank); the key metadata names an active and a standby instance for
every partition; a key owned elsewhere is answered by its owner. Then one instance is killed (-9)
under 8 reader threads: every read still answers (5xx only inside the failover window, measured and
printed), every answer equals the reference, standbys stand in until Kafka moves the dead instance's
partitions to the survivors, which the metadata then shows. Restarted, it rejoins and answers again.

The snapshot is generated (publish_generated: the production publisher, rows from here) so the
test spends its time on the tier, not on Spark; each key's source partition is its murmur2
partition, as a real run writes it. Memory: after the same reads over every key, an instance of
three holds less of the read index resident (RSS from /proc) than one instance alone, because it
searches its partitions' rows only.
"""

from __future__ import annotations

import bisect
import dataclasses
import os
import random
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from support.cli_runs import DELTASTATE
from support.local_infra import free_port, make_home

from deltastate.config import Settings
from deltastate.ingest.partitioner import partition_for
from deltastate.snapshot.generated import GeneratedStore, publish_generated
from deltastate.stores import load_store

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
STORE = "player_stats"
TOPIC = "game-results"  # the store's declared source: with no checkpoint, the topic it runs on
PARTITIONS = 4
# Enough rows that the read index's resident pages show beside the interpreter: the page cache maps
# files in folios of up to 2 MB, so a partition's slice of a column must be several of those.
KEYS = 900_000
WARM_EVERY = 12  # every 12th key read touches every page of every column
WARM_BATCH = 250
FIELDS = ("games", "total_score", "best_score", "last_played")
SESSION_TIMEOUT_S = 6  # the broker's group.min.session.timeout.ms


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


@pytest.fixture(scope="module")
def tier(broker: str, session_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    from confluent_kafka.admin import AdminClient, NewTopic

    home = make_home(tmp_path_factory.mktemp("tier-home"))
    settings = dataclasses.replace(session_settings, home=home, storage_root=str(home / "data"))
    admin = AdminClient({"bootstrap.servers": broker})
    if TOPIC not in admin.list_topics(timeout=10).topics:
        for future in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)]).values():
            try:
                future.result()
            except Exception as exc:  # noqa: BLE001 - created meanwhile by another test is fine
                assert "TOPIC_ALREADY_EXISTS" in str(exc), exc
    state = rows_of(seed=35)
    publish(settings, state)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DELTASTATE_", "KAFKA_"))}
    env.update(settings.to_env(), DELTASTATE_TIER_GROUP=f"deltastate-serve-{uuid.uuid4().hex[:8]}",
               DELTASTATE_TIER_SESSION_TIMEOUT=str(SESSION_TIMEOUT_S))
    instances = [Instance(f"http://127.0.0.1:{port}", port) for port in (free_port(), free_port(), free_port())]
    world = {"settings": settings, "env": env, "instances": instances, "ref": Reference(state),
             "logs": home, "rss": {}}
    port = free_port()
    alone = Instance(f"http://127.0.0.1:{port}", port)
    try:
        start(alone, env, home)  # one instance alone: it answers every partition
        owners(alone.url, world["ref"])  # the metadata reads the three answer while they form the tier
        warm([alone.url], world["ref"])
        world["rss"]["alone"] = (alone.rss_mb(), alone.index_mb())
        alone.proc.terminate()  # it leaves the group as it stops
        alone.proc.wait(15)
        for instance in instances:
            start(instance, env, home)
        wait_for_view(instances, {i.url for i in instances}, world["ref"])
        warm([i.url for i in instances], world["ref"])
        world["rss"]["three"] = {i.url: (i.rss_mb(), i.index_mb()) for i in instances}
        yield world
    finally:
        for instance in [alone, *instances]:
            if instance.proc is not None and instance.proc.poll() is None:
                instance.proc.terminate()
                instance.proc.wait(15)


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


# -- the checks ------------------------------------------------------------------------------------
def check_reads(url: str, reference: Reference, rng: random.Random) -> None:
    with httpx.Client(base_url=url, timeout=30) as http:
        for key in rng.sample(reference.keys, 30):
            r = http.get(f"/stores/{STORE}/keys/{key}")
            assert r.status_code == 200 and values(r.json()["value"]) == reference.state[key], (url, key, r.text)
        r = http.get(f"/stores/{STORE}/keys/nobody")
        assert r.status_code == 404 and r.json()["error"]["type"] == "key_not_found", r.text

        asked = [*rng.sample(reference.keys, 40), "nobody", reference.keys[7], reference.keys[7]]
        r = http.post(f"/stores/{STORE}/keys:batchGet", json={"keys": asked})
        assert r.status_code == 200, r.text
        body = r.json()
        assert [row["key"] for row in body["rows"]] == [k for k in asked if k in reference.state]
        assert all(values(row) == reference.state[row["key"]] for row in body["rows"])
        assert body["missing"] == ["nobody"]
        # Refusals are a single instance's: one key too many, a bad parameter of a scattered read.
        r = http.post(f"/stores/{STORE}/keys:batchGet", json={"keys": reference.keys[:1_001]})
        assert r.status_code == 400 and r.json()["error"]["type"] == "bad_parameter", r.text
        r = http.get(f"/stores/{STORE}/top", params={"n": 10, "by": "nothing"})
        assert r.status_code == 400 and r.json()["error"]["parameter"] == "by", r.text

        low, high = reference.keys[1_000], reference.keys[1_350]
        rows, cursor = [], None
        while True:
            params = {"from": low, "to": high, "limit": 100, **({"cursor": cursor} if cursor else {})}
            page = http.get(f"/stores/{STORE}/range", params=params).json()
            rows += page["rows"]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert [row["key"] for row in rows] == reference.range(low, high)
        assert all(values(row) == reference.state[row["key"]] for row in rows)
        first = http.get(f"/stores/{STORE}/all", params={"limit": 50}).json()
        assert [row["key"] for row in first["rows"]] == reference.keys[:50]

        for n in (1, 25, 300):
            top = http.get(f"/stores/{STORE}/top", params={"n": n}).json()
            assert [(row["key"], row["total_score"]) for row in top["rows"]] == reference.top(n), (url, n)
        for key in [*rng.sample(reference.keys, 20), reference.order[0], reference.order[-1]]:
            body = http.get(f"/stores/{STORE}/keys/{key}/rank").json()
            assert body["rank"] == reference.rank_of[key] == body["row"]["rank"], (url, key, body)
            assert body["row"]["total_score"] == reference.state[key]["total_score"]


def test_every_instance_answers_every_read(tier) -> None:
    reference, rng = tier["ref"], random.Random(1)
    for instance in tier["instances"]:
        check_reads(instance.url, reference, rng)


def test_metadata_names_owner_and_standby_and_reads_go_to_the_owner(tier) -> None:
    reference, instances = tier["ref"], tier["instances"]
    view = owners(instances[0].url, reference)
    urls = sorted(i.url for i in instances)
    for active, standbys in view.values():  # the standby is the next instance in sorted order
        assert standbys == [urls[(urls.index(active) + 1) % len(urls)]]
    for key in reference.keys[:40]:
        active = view[partition_for(key, PARTITIONS)][0]
        for instance in instances:
            r = httpx.get(f"{instance.url}/stores/{STORE}/keys/{key}", timeout=10)
            assert r.status_code == 200, r.text
            assert r.headers["X-Deltastate-Served-By"] == active and r.headers["X-Deltastate-Served-As"] == "active"



def test_an_instance_of_three_holds_less_than_one_alone(tier) -> None:
    (alone, alone_index), three = tier["rss"]["alone"], tier["rss"]["three"]
    print(f"\nRSS after the same reads: one instance alone {alone:.1f} MB (read index {alone_index:.1f} MB); "
          f"each of three {', '.join(f'{rss:.1f} MB (read index {index:.1f} MB)' for rss, index in three.values())}")
    assert max(index for _, index in three.values()) < alone_index
    assert max(rss for rss, _ in three.values()) < alone


def reader(urls: list[str], reference: Reference, seed: int, stop: threading.Event, log: list) -> None:
    rng = random.Random(seed)
    with httpx.Client(timeout=30) as http:
        while not stop.is_set():
            url, kind = rng.choice(urls), rng.choice(["get", "get", "batch", "top", "rank", "range"])
            at = time.monotonic()
            try:
                if kind == "get":
                    key = rng.choice(reference.keys)
                    r = http.get(f"{url}/stores/{STORE}/keys/{key}")
                    ok = r.status_code == 200 and values(r.json()["value"]) == reference.state[key]
                elif kind == "batch":
                    keys = rng.sample(reference.keys, 12)
                    r = http.post(f"{url}/stores/{STORE}/keys:batchGet", json={"keys": keys})
                    ok = r.status_code == 200 and [values(row) for row in r.json()["rows"]] == \
                        [reference.state[k] for k in keys]
                elif kind == "top":
                    r = http.get(f"{url}/stores/{STORE}/top", params={"n": 20})
                    ok = r.status_code == 200 and \
                        [(row["key"], row["total_score"]) for row in r.json()["rows"]] == reference.top(20)
                elif kind == "rank":
                    key = rng.choice(reference.keys)
                    r = http.get(f"{url}/stores/{STORE}/keys/{key}/rank")
                    ok = r.status_code == 200 and r.json()["rank"] == reference.rank_of[key]
                else:
                    i = rng.randrange(len(reference.keys) - 60)
                    low, high = reference.keys[i], reference.keys[i + 59]
                    r = http.get(f"{url}/stores/{STORE}/range", params={"from": low, "to": high, "limit": 100})
                    ok = r.status_code == 200 and [row["key"] for row in r.json()["rows"]] == reference.range(low, high)
                log.append((at, kind, r.status_code, ok, r.headers.get("X-Deltastate-Served-As"), r.text[:200]))
            except httpx.HTTPError as exc:
                log.append((at, kind, None, False, None, repr(exc)))


def test_kill_one_instance_under_load_then_it_rejoins(tier) -> None:
    reference, instances, env = tier["ref"], tier["instances"], tier["env"]
    before = owners(instances[0].url, reference)
    victim = next(i for i in instances if i.url == before[0][0])  # the owner of partition 0
    survivors = [i for i in instances if i is not victim]
    stop, log = threading.Event(), []
    threads = [threading.Thread(target=reader, args=([s.url for s in survivors], reference, n, stop, log))
               for n in range(8)]
    for t in threads:
        t.start()
    try:
        time.sleep(1.5)
        killed_at = time.monotonic()
        victim.proc.kill()
        victim.proc.wait(10)
        after = wait_for_view(survivors, {s.url for s in survivors}, reference, timeout=60)
        moved_at = time.monotonic()
        time.sleep(1.5)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert all(active != victim.url for active, _ in after.values())
    assert {p for p, (active, _) in before.items() if active == victim.url} <= set(after)

    failed = [entry for entry in log if entry[2] is None or entry[2] >= 500]
    wrong = [entry for entry in log if entry[2] is not None and entry[2] < 500 and not entry[3]]
    window = (max(e[0] for e in failed) - min(e[0] for e in failed)) if failed else 0.0
    standby = [e for e in log if e[4] == "standby"]
    print(f"\nkill -9 under 8 readers: {len(log)} reads, {len(failed)} 5xx/errors over {window:.2f}s, "
          f"{len(standby)} answered by a standby; Kafka moved the partitions "
          f"{moved_at - killed_at:.1f}s after the kill (session timeout {SESSION_TIMEOUT_S}s)")
    assert not wrong, wrong[:5]
    assert not failed, failed[:5]  # a standby answers while the owner is down: no failover window
    assert standby, "no read was answered by a standby while the owner was down"
    assert len([e for e in log if e[0] > moved_at]) > 0

    start(victim, env, tier["logs"])  # restarted at the same URL: it rejoins the group
    wait_for_view(instances, {i.url for i in instances}, reference)
    check_reads(victim.url, reference, random.Random(2))


def test_an_instance_tails_only_the_partitions_it_reads(broker: str, topic: str) -> None:
    """The tail of a tier instance (on demand) holds a partition from its first read on, caught up
    with everything produced before that read, and no other partition."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from deltastate.query.tail import SourceTail

    admin = AdminClient({"bootstrap.servers": broker})
    [created] = admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values()
    created.result()
    producer = Producer({"bootstrap.servers": broker})
    sent: dict[int, list[tuple[bytes, bytes]]] = {p: [] for p in range(PARTITIONS)}

    def produce(n: int, tag: str) -> None:
        for i in range(n):
            p, key, value = i % PARTITIONS, f"k{i}".encode(), f"{tag}-{i}".encode()
            producer.produce(topic, value, key, partition=p)
            sent[p].append((key, value))
        assert producer.flush(10) == 0

    produce(40, "first")
    tail = SourceTail(broker, topic, {}, on_demand=True)
    try:
        assert tail.held() == []
        records, _ = tail.snapshot(2, -1)
        assert [(k, v) for _, k, v in records] == sent[2] and tail.held() == [2]
        produce(40, "second")
        deadline = time.monotonic() + 10
        while [(k, v) for _, k, v in tail.snapshot(2, -1)[0]] != sent[2]:
            assert time.monotonic() < deadline, "the tail did not follow partition 2"
            time.sleep(0.05)
        records, _ = tail.snapshot(0, -1)
        assert [(k, v) for _, k, v in records] == sent[0] and tail.held() == [0, 2]
    finally:
        tail.close()
