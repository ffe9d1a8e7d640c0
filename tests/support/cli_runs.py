"""Running `deltastate` as a user runs it (a new process, settings from DELTASTATE_* variables) and
reading what it prints: the aligned tables, single records and JSON lines, for the CLI tests."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deltastate.config import Settings
from support.reference import VALUE_FIELDS, ReferenceTopic, expected

DELTASTATE = str(Path(sys.executable).parent / "deltastate")


@dataclass
class World:
    settings: Settings
    env: dict[str, str]
    topics: dict[str, str]
    leaderboard: ReferenceTopic
    windowed: dict[str, Any] = field(default_factory=dict)  # store -> reference state
    published: dict[str, dict[str, int]] = field(default_factory=dict)  # the snapshot's reference state
    committed_upto: int = 0  # leaderboard records the stream has committed

    def committed(self, upto: int) -> dict[str, dict[str, int]]:
        """The reference state of the first `upto` leaderboard records."""
        return expected(self.leaderboard.records[:upto], self.settings.max_value_bytes).state


def clean(proc: subprocess.CompletedProcess) -> None:
    for stream in (proc.stdout, proc.stderr):
        assert "Traceback" not in stream, stream[-3000:]
        assert "at org.apache" not in stream and "Exception in thread" not in stream, stream[-3000:]


def cli(world: World, *args: str, code: int = 0, timeout: float = 900) -> subprocess.CompletedProcess:
    proc = subprocess.run([DELTASTATE, *args], env=world.env, capture_output=True, text=True, timeout=timeout)
    clean(proc)
    assert proc.returncode == code, (args, proc.returncode, proc.stdout[-2000:], proc.stderr[-3000:])
    return proc


def refused(world: World, *args: str, code: int = 2, spark: bool = False) -> str:
    """A refusal: the exit status, nothing on stdout, one `error:` / `not found:` line on stderr (a
    command that started Spark may have logged JVM warnings before it)."""
    proc = cli(world, *args, code=code)
    prefix = "not found: " if code == 1 else "error: "
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    # A command refused after its start line (a run that found its checkpoint lost) printed that line.
    assert lines and (proc.stdout == "" or (spark and len(proc.stdout.splitlines()) == 1)), (args, proc.stdout,
                                                                                            proc.stderr)
    assert lines[-1].startswith(prefix), (args, proc.stderr)
    assert spark or len(lines) == 1, (args, proc.stderr)
    return lines[-1]


def json_rows(proc: subprocess.CompletedProcess) -> list[dict[str, Any]]:
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


FOOTER = re.compile(r"^\((\d+) rows?, snapshot (\d+)(, .*)?\)$")


def table(proc: subprocess.CompletedProcess, snapshot: int) -> tuple[list[str], list[dict[str, str]]]:
    """The aligned table: header, dashes, rows, footer; columns found from the runs of dashes."""
    header, dashes, *body = proc.stdout.rstrip("\n").split("\n")
    footer = FOOTER.match(body.pop())
    assert footer is not None, proc.stdout
    spans = [(m.start(), m.end()) for m in re.finditer(r"-+", dashes)]
    columns = [header[a:b].strip() for a, b in spans]
    rows = [{c: line[a:b].strip() for c, (a, b) in zip(columns, spans, strict=True)} for line in body]
    assert (int(footer.group(1)), int(footer.group(2))) == (len(rows), snapshot), proc.stdout
    return columns, rows


def record(proc: subprocess.CompletedProcess) -> dict[str, str]:
    """A single get: `name  value` lines, then the footer."""
    *lines, footer = proc.stdout.rstrip("\n").split("\n")
    assert FOOTER.match(footer), proc.stdout
    return dict(line.split(None, 1) for line in lines)


def values(row: dict[str, Any]) -> dict[str, int]:
    return {f: int(row[f]) for f in VALUE_FIELDS}


def keyed(rows: list[dict[str, Any]]) -> list[tuple[str, dict[str, int]]]:
    return [(row["key"], values(row)) for row in rows]
