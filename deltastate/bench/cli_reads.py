"""CLI read benchmark: the wall time of `deltastate get|top|rank STORE ...` as a user runs it, a new
process per read against the current published snapshot. Such a read is all start-up (interpreter,
imports, opening one DuckDB file), so the figure is what a person or a shell script waits for; the
heavy modules (pyspark, pandas, delta, airflow, and pydantic and PyYAML, which only checking a changed
store file needs: stores/loader.py) must stay out of the process."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from deltastate.config import Settings

HEAVY = ("pyspark", "pandas", "delta", "great_expectations", "airflow", "numpy", "pyarrow", "pydantic", "yaml")
# Runs `deltastate ARGS...` and prints, as it ends, the top-level packages the process imported.
_DRIVER = """
import atexit, json, sys
atexit.register(lambda: print("MODULES " + json.dumps(sorted({m.split('.')[0] for m in sys.modules})),
                              file=sys.stderr))
sys.argv = ["deltastate", *sys.argv[1:]]
from deltastate.cli.main import main
main()
"""


@dataclass(frozen=True)
class CliReadFigures:
    store: str
    runs: int
    seconds: dict[str, list[float]]  # read -> wall seconds per run
    heavy: dict[str, list[str]]  # read -> heavy packages its process imported

    def to_dict(self) -> dict:
        return {"store": self.store, "runs": self.runs, "heavy_imports": self.heavy,
                "median_seconds": {k: statistics.median(v) for k, v in self.seconds.items()},
                "seconds": self.seconds}

    def lines(self) -> list[str]:
        out = [f"bench cli: one read per new process on store {self.store!r}, {self.runs} runs each "
               "(after one uncounted read that fills the OS page cache and the definition cache)"]
        for read, values in self.seconds.items():
            heavy = ", ".join(self.heavy[read]) or "none"
            out.append(f"  {read:<34} median {statistics.median(values):.3f} s  max {max(values):.3f} s  "
                       f"heavy imports: {heavy}")
        return out


def _reads(store: str, key: str) -> dict[str, list[str]]:
    return {f"get {store} KEY": ["get", store, key], f"top {store} --n 10": ["top", store, "--n", "10"],
            f"rank {store} KEY": ["rank", store, key]}


def run_cli_read_bench(settings: Settings, store: str, key: str, runs: int = 7) -> CliReadFigures:
    env = {**os.environ, **settings.to_env()}
    executable = str(Path(sys.executable).parent / "deltastate")
    seconds: dict[str, list[float]] = {}
    heavy: dict[str, list[str]] = {}
    for name, args in _reads(store, key).items():
        # A first read fills the OS page cache and, after a store file changed, the definition cache.
        subprocess.run([executable, *args], env=env, capture_output=True, timeout=120)
        probe = subprocess.run([sys.executable, "-c", _DRIVER, *args], env=env, capture_output=True, text=True,
                               timeout=120)
        if probe.returncode != 0:
            raise RuntimeError(f"`deltastate {' '.join(args)}` failed: {probe.stderr.strip()[-500:]}")
        [line] = [x for x in probe.stderr.splitlines() if x.startswith("MODULES ")]
        heavy[name] = sorted(set(json.loads(line.removeprefix("MODULES "))) & set(HEAVY))
        times = []
        for _ in range(runs):
            began = time.perf_counter()
            subprocess.run([executable, *args], env=env, capture_output=True, check=True, timeout=120)
            times.append(time.perf_counter() - began)
        seconds[name] = times
    return CliReadFigures(store, runs, seconds, heavy)
