"""Three `deltastate serve` instances (new processes, local ports) form a query tier over one
published player_stats snapshot through the real broker's consumer-group protocol.

Reads at every instance equal a reference computed from the rows published (get, batchGet,
range pages, all, top with ties, rank); the key metadata names an active and a standby instance for
every partition; a key owned elsewhere is answered by its owner. Then one instance is killed (-9)
under 8 reader threads: every read still answers (5xx only inside the failover window, measured and
printed), every answer equals the reference, standbys stand in until Kafka moves the dead instance's
partitions to the survivors, which the metadata then shows. Restarted, it rejoins and answers again.

The snapshot is generated (publish_generated: the production publisher, rows from
tests/support/query_tier.py) so the test spends its time on the tier, not on Spark; each key's source
partition is its murmur2 partition, as a real run writes it. Memory: after the same reads over every
key, an instance of three holds less of the read index resident (RSS from /proc) than one instance
alone, because it searches its partitions' rows only.
"""

from __future__ import annotations

import dataclasses
import os
import random
import threading
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest
from support.local_infra import free_port, make_home
from support.query_tier import (
    PARTITIONS,
    STORE,
    TOPIC,
    Instance,
    Reference,
    owners,
    publish,
    rows_of,
    start,
    values,
    wait_for_view,
    warm,
)

from deltastate.config import Settings
from deltastate.ingest.partitioner import partition_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
SESSION_TIMEOUT_S = 6  # the broker's group.min.session.timeout.ms


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
