"""How `make test` shares the test files between its pytest workers (pytest-xdist).

Each work unit is one test file, so a module's fixtures (a store built once and read by many tests)
run on one worker only. Two rules on top of xdist's `--dist loadfile`:

- the files that take longest start first, so the two workers finish together instead of one
  running a long file alone at the end while the other has nothing left (longest-first is the
  classic rule for sharing jobs of known length between machines);
- a file whose tests run once per parameter of a class-scoped fixture (the store contract: one
  store run per backend) is one unit per parameter, so its runs can go to both workers.

The lists name files, not figures: `make test` prints the slowest tests (`--durations`), which is
what to read when a file grows into the long ones.
"""

from __future__ import annotations

import re

from xdist.scheduler import LoadFileScheduling

# Longest first, as `make test --durations` shows them on two workers.
LONG_FILES = (
    "tests/integration/test_metrics_prometheus.py",
    "tests/integration/test_airflow_live.py",
    "tests/integration/test_cli_commands.py",
    "tests/integration/test_crash_trials.py",
    "tests/integration/test_migration_live.py",
    "tests/integration/test_service_fastpath.py",
    "tests/integration/test_migration.py",
    "tests/integration/test_continuous_restart.py",
    "tests/integration/test_bench_peers.py",
)
# Files split into one unit per parameter of their class-scoped fixture.
SPLIT_BY_PARAMETER = ("tests/integration/test_store_contract.py",)

_PARAMETER = re.compile(r"\[([^\]]*)\]$")


def unit_of(nodeid: str) -> str:
    """The work unit of a test: its file, or its file and parameter for a file split by parameter."""
    path = nodeid.split("::", 1)[0]
    if path in SPLIT_BY_PARAMETER:
        parameter = _PARAMETER.search(nodeid)
        return f"{path}[{parameter.group(1)}]" if parameter else path
    return path


def rank_of(unit: str) -> int:
    """Where a unit starts: the long files in their order, then the split files' units, then the rest."""
    path = unit.split("[", 1)[0]
    if path in LONG_FILES:
        return LONG_FILES.index(path)
    if path in SPLIT_BY_PARAMETER:
        return len(LONG_FILES)
    return len(LONG_FILES) + 1


class LongestFirstScheduling(LoadFileScheduling):
    """xdist's per-file scheduling with the units split and ordered as above."""

    _ordered = False

    def _split_scope(self, nodeid: str) -> str:
        return unit_of(nodeid)

    def _assign_work_unit(self, node) -> None:  # noqa: ANN001 (xdist's WorkerController)
        # The queue is complete before its first unit is sent; sorted() is stable, so units of equal
        # rank keep collection order.
        if not self._ordered:
            for unit in sorted(self.workqueue, key=rank_of):
                self.workqueue.move_to_end(unit)
            self._ordered = True
        super()._assign_work_unit(node)
