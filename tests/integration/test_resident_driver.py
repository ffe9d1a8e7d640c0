"""The resident driver through the real parts: `deltastate driver start|status|stop` and `deltastate
run STORE --once` as new processes, the driver's own Spark session against the session's broker,
Delta tables and a published DuckDB snapshot. The store runs one batch, then several, then a run
whose driver is killed mid-command; a new driver finishes the backlog, and the published state
equals the reference folded here from the produced records (nothing lost, nothing applied twice).
The Airflow operator's resident mode publishes through the same driver; a second driver for the
home is refused, and the driver refuses a continuous run."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import uuid
from collections.abc import Iterator

import pytest
from support.cli_runs import DELTASTATE, World, clean, json_rows, keyed
from support.local_infra import make_home
from support.reference import ReferenceTopic, expected

from deltastate.bench.soak import child_env
from deltastate.config import Settings
from deltastate.driver.protocol import DriverPaths
from deltastate.ingest.generators import encode, leaderboard_events
from deltastate.ingest.partitioner import partition_for
from deltastate.ingest.producer import ensure_topic, produce_records

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]

STORE, PLAYERS = "player_stats", 300
BROKEN = (b"broken", b'{"player_id": "broken",')  # dead-lettered: not JSON


def produce(world: World, events: int, seed: int) -> int:
    records = [(k.encode(), None if e is None else encode(e))
               for k, e in leaderboard_events(events, PLAYERS, seed, tombstones=0.02)]
    assert produce_records(world.settings.kafka_bootstrap, world.topics[STORE], records).delivered == len(records)
    world.leaderboard.append(records)
    return len(records)


def cli(world: World, *args: str, code: int = 0, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`deltastate ARGS` in a new process under the world's environment (plus env)."""
    proc = subprocess.run([DELTASTATE, *args], env={**world.env, **(env or {})}, capture_output=True, text=True,
                          timeout=900)
    clean(proc)
    assert proc.returncode == code, (args, proc.returncode, proc.stdout[-2000:], proc.stderr[-3000:])
    return proc


def last_json(proc: subprocess.CompletedProcess) -> dict:
    """The figures `run --json` ends with."""
    return json.loads(proc.stdout.strip().splitlines()[-1])


def driver_pid(world: World) -> int:
    return json.loads(DriverPaths.of(world.settings).info.read_text())["pid"]


@pytest.fixture()
def world(session_settings: Settings, broker: str, tmp_path) -> Iterator[World]:
    """A home of its own; a driver a failed test left serving it is killed with its JVM afterwards."""
    home = make_home(tmp_path / "home")
    settings = dataclasses.replace(session_settings, home=home, storage_root=str(home / "data"))
    env = {k: v for k, v in child_env(settings).items() if not k.startswith("SPARK_") or k == "SPARK_LOCAL_DIRS"}
    topic = f"resident-{uuid.uuid4().hex[:8]}"
    ensure_topic(settings.kafka_bootstrap, topic, 4)
    world = World(settings, env, {STORE: topic}, ReferenceTopic(4, partition_for))
    yield world
    info = DriverPaths.of(settings).info
    if info.exists():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(driver_pid(world), signal.SIGKILL)


def test_runs_in_the_driver_survive_its_death_and_match_the_reference(world: World, monkeypatch) -> None:
    run = ("run", STORE, "--once", "--topic", world.topics[STORE])
    missing = cli(world, "driver", "status", code=2)
    assert missing.stderr.strip() == f"error: no resident driver serves {world.settings.home}; start one with " \
                                     "`deltastate driver start`"
    started = cli(world, "driver", "start")
    pid = driver_pid(world)
    assert started.stdout.startswith(f"resident driver pid {pid} serves {world.settings.home}")

    # One batch, then several: each a new client process, each run in the same driver.
    total = produce(world, 3_000, seed=3)
    assert produce_records(world.settings.kafka_bootstrap, world.topics[STORE], [BROKEN]).delivered == 1
    world.leaderboard.append([BROKEN])
    total += 1
    first = cli(world, *run)
    assert f"in the resident driver (pid {pid})" in first.stdout
    assert f"{STORE}: {total:,} records in = {total - 1:,} applied + 1 dead-lettered" in first.stdout, first.stdout
    more = produce(world, 2_000, seed=4)
    several = cli(world, *run, "--max-offsets-per-trigger", "600", "--json")
    figures = last_json(several)
    assert f"in the resident driver (pid {pid})" in several.stdout
    assert figures["records_in"] == more == figures["applied"] and figures["batches"] >= 3
    status = cli(world, "driver", "status").stdout
    assert f"resident driver pid {pid} serves" in status and "2 commands, idle" in status

    # A refusal comes back as the same one line and exit status a process gives; the driver goes on.
    wrong = cli(world, "run", "no_such_store", "--once", code=2)
    assert wrong.stdout == "" and wrong.stderr.count("\n") == 1 and "no_such_store" in wrong.stderr
    # A client with other settings runs in its own process, and says so first.
    other = cli(world, "run", "no_such_store", "--once", code=2, env={"DELTASTATE_SNAPSHOT_KEEP": "7"})
    note, error = other.stderr.strip().splitlines()
    assert note.startswith(f"note: the resident driver of {world.settings.home} runs with another "
                           "settings.DELTASTATE_SNAPSHOT_KEEP; running here instead")
    assert error.startswith("error: ") and "no_such_store" in error

    # The driver dies in the middle of a run: the client says so in one line, exit 2.
    produce(world, 30_000, seed=5)
    client = subprocess.Popen([DELTASTATE, *run, "--max-offsets-per-trigger", "2500"], env=world.env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert client.stdout is not None
    assert "in the resident driver" in client.stdout.readline()
    assert client.stdout.readline().lstrip().startswith("batch ")  # a batch committed; the run goes on
    # A second client waits for its turn, and says so.
    waiting = subprocess.Popen([DELTASTATE, *run], env=world.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    assert waiting.stderr is not None
    note = waiting.stderr.readline()
    assert note.startswith(f"note: the resident driver is running `deltastate run {STORE} --once") and \
        note.endswith("--max-offsets-per-trigger 2500`; this command runs after it\n"), note
    os.killpg(pid, signal.SIGKILL)  # the driver and its JVM, as a crash of its machine would end them
    for ended in (client, waiting):
        out, err = ended.communicate(timeout=120)
        assert ended.returncode == 2, (out, err)
        assert err.strip().splitlines()[-1].startswith("error: the resident driver ended during `deltastate run")

    # A new driver takes the writer lock the dead one held, and finishes the backlog exactly once.
    restarted = cli(world, "driver", "start")
    assert driver_pid(world) != pid and "serves" in restarted.stdout
    finish = last_json(cli(world, *run, "--json"))
    assert 0 < finish["records_in"] <= 30_000 and finish["dead_lettered"] == 0

    # The operator's resident mode: `job publish` runs in the driver, its figures come back as XCom.
    # This process's environment is then the driver's clients', so its fingerprint matches too.
    from deltastate.orchestration.operators import DEPLOY_ENV, DeltastateSparkOperator

    for name, value in {**world.env, DEPLOY_ENV: "resident"}.items():
        monkeypatch.setenv(name, value)
    published = DeltastateSparkOperator(task_id="publish", action="publish", store="*").execute({"run_id": "t"})
    assert published["action"] == "publish" and "error" not in published
    state = expected(world.leaderboard.records, world.settings.max_value_bytes).state
    assert keyed(json_rows(cli(world, "all", STORE, "--json"))) == sorted(state.items())

    # A second driver for the home is refused by name, and the driver never runs a continuous run.
    again = subprocess.run([DELTASTATE, "driver", "serve"], env=world.env, capture_output=True, text=True, timeout=120)
    clean(again)
    assert again.returncode == 2 and again.stderr.strip() == (
        f"error: a resident driver (pid {driver_pid(world)}) already serves {world.settings.home}; stop it first "
        "with `deltastate driver stop`")
    from deltastate.driver import client

    sent: list[tuple[str, str]] = []
    code = client.send_command(world.settings, ["run", STORE, "--continuous"], lambda k, t: sent.append((k, t)))
    assert code == 2 and sent == [("err", "error: the resident driver runs `deltastate run STORE --once` and "
                                          f"`deltastate job ...`, not `deltastate run {STORE} --continuous`\n")]

    # Each command's writer lock ended with it: a run in its own process finds the checkpoint free.
    alone = cli(world, *run, "--in-process", "--json", env={"DELTASTATE_WRITER_LOCK_WAIT": "5"})
    assert "resident driver" not in alone.stdout and last_json(alone)["records_in"] == 0

    stopped = cli(world, "driver", "stop")
    assert stopped.stdout.strip().endswith("stopped after 2 commands")  # the finishing run and the publish
    assert not DriverPaths.of(world.settings).socket.exists()
    cli(world, "driver", "status", code=2)
