"""Window fetch and findSessions through the REST service and the CLI, checked against a reference
state (tests/reference_windowed.py): the reads of a store that a test has just run and published.

A reference state maps (key, window or session start, end) -> the value fields."""

from __future__ import annotations

import json
import math
import random
from typing import Any

import click
from click.testing import CliRunner
from fastapi.testclient import TestClient

from deltastate.cli.query_cmd import register

State = dict[tuple[str, int, int], dict[str, Any]]
Expected = list[tuple[tuple[str, int, int], dict[str, Any]]]
EVERYTHING = (-1, 2**62)


def same(rows: list[dict[str, Any]], expected: Expected) -> bool:
    """Rows equal the expected entries, in order (floats within 1e-9 relative)."""
    if [(r["key"], r["window_start"], r["window_end"]) for r in rows] != [e for e, _ in expected]:
        return False
    for row, (_, values) in zip(rows, expected):
        for name, want in values.items():
            got = row[name]
            if not (math.isclose(got, want, rel_tol=1e-9) if isinstance(want, float) else got == want):
                return False
    return True


def fetch(state: State, key: str | None, lo: int, hi: int) -> Expected:
    """WindowStore.fetch (one key) or fetchAll (key None): windows starting in [lo, hi], time-ordered."""
    hits = [(e, v) for e, v in state.items() if (key is None or e[0] == key) and lo <= e[1] <= hi]
    return sorted(hits, key=lambda x: (x[0][1], x[0][0], x[0][2]))


def find_sessions(state: State, key: str, earliest_end: int, latest_start: int) -> Expected:
    hits = [(e, v) for e, v in state.items() if e[0] == key and e[2] >= earliest_end and e[1] <= latest_start]
    return sorted(hits, key=lambda x: (x[0][1], x[0][2]))


def key_reads(client: TestClient, store: str, kind: str, key: str, state: State, fresh: bool = False) -> None:
    """All of one key's windows or sessions, plain or fresh (committed but unpublished changes)."""
    params = {"fresh": "true"} if fresh else {}
    path = f"/stores/{store}/keys/{key}/{'windows' if kind == 'window' else 'sessions'}"
    r = client.get(path, params=params)
    assert r.status_code == 200, r.text
    want = fetch(state, key, *EVERYTHING) if kind == "window" else find_sessions(state, key, *EVERYTHING)
    got = r.json()["rows"]
    assert same(got, want), (key, fresh, [(g["window_start"], g["window_end"]) for g in got], [e[1:] for e, _ in want])
    if fresh:
        assert r.json()["meta"]["staleness_seconds"] == 0.0


def ranged_reads(client: TestClient, settings, store: str, kind: str, state: State, seed: int) -> None:
    """Random key and time ranges over REST, then one key through the CLI, against the state."""
    keys = sorted({e[0] for e in state})
    starts = sorted(e[1] for e in state)
    rng = random.Random(seed)
    for _ in range(12):
        key = rng.choice(keys)
        lo = rng.choice(starts) - rng.randint(0, 5_000)
        hi = lo + rng.randint(0, (starts[-1] - starts[0]) // 3)
        if kind == "window":
            got = client.get(f"/stores/{store}/keys/{key}/windows", params={"from": lo, "to": hi}).json()["rows"]
            assert same(got, fetch(state, key, lo, hi)), (key, lo, hi)
            body = client.get(f"/stores/{store}/windows", params={"from": lo, "to": hi, "limit": 10_000}).json()
            assert same(body["rows"], fetch(state, None, lo, hi)) and not body["truncated"]
        else:
            got = client.get(f"/stores/{store}/keys/{key}/sessions",
                             params={"earliest_end": lo, "latest_start": hi}).json()["rows"]
            assert same(got, find_sessions(state, key, lo, hi)), (key, lo, hi)
            key_reads(client, store, kind, key, state)

    group = click.Group("main")
    register(group)
    key = keys[0]
    if kind == "window":
        args, want = ["windows", store, key, "--from", str(starts[0]), "--to", str(starts[-1])], \
            fetch(state, key, starts[0], starts[-1])
    else:
        args, want = ["sessions", store, key], find_sessions(state, key, *EVERYTHING)
    out = CliRunner().invoke(group, [*args, "--json"], obj=settings)
    assert out.exit_code == 0, out.output + out.stderr
    assert same([json.loads(line) for line in out.output.splitlines()], want)


def changed_keys(before: State, after: State) -> list[str]:
    """Keys with an entry added, removed or changed between two states."""
    moved = {e[0] for e in set(before) ^ set(after)}
    return sorted(moved | {e[0] for e in before.keys() & after.keys() if before[e] != after[e]})
