"""HTTP load for the query bench: wrk (a real load generator, C, one connection per client) against
`deltastate serve --workers N` (with its fast path for point reads, and without it) and against the
bare-stack floor (floor_app.py), random keys per request; the servers' resident size and the CPU
time they spend per request from /proc (a figure that stays meaningful on a machine shared with
other work, where requests per second depend on what else runs)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from deltastate.config import Settings

_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0}


@dataclass(frozen=True)
class LoadCell:
    target: str  # serve | serve-fastapi (fast path off) | floor
    connections: int
    requests_per_s: float
    p50_ms: float
    p99_ms: float
    errors: int
    op: str = "get"  # get | top100
    cpu_us: float | None = None  # server CPU time (user + system, all its processes) per request

    def line(self) -> str:
        cpu = "" if self.cpu_us is None else f"  server CPU {self.cpu_us:6.0f} us/req"
        return (f"  wrk {self.target:<13} {self.op:<6} c={self.connections:<3} {self.requests_per_s:>9,.0f} req/s  "
                f"p50 {self.p50_ms:8.2f} ms  p99 {self.p99_ms:8.2f} ms{cpu}" + (f"  errors {self.errors}" if self.errors else ""))


def wrk_available() -> bool:
    return shutil.which("wrk") is not None


def _script(keys: int, op: str) -> Path:
    """A wrk Lua script: a random key of the snapshot per request (get), or the top 100 (top100)."""
    if op == "top100":
        text = "request = function()\n  return wrk.format('GET', '/stores/player_stats/top?n=100')\nend\n"
    else:
        text = ("math.randomseed(os.time())\n"
                "request = function()\n"
                f"  return wrk.format('GET', string.format('/stores/player_stats/keys/player-%09d', "
                f"math.random(0, {keys - 1})))\n"
                "end\n")
    path = Path(tempfile.mkstemp(suffix=".lua")[1])
    path.write_text(text)
    return path


def parse_wrk(output: str) -> tuple[float, float, float, int]:
    """(requests/s, p50 ms, p99 ms, errors) from `wrk --latency` output."""
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1))  # type: ignore[union-attr]

    def pct(p: str) -> float:
        found = re.search(rf"^\s+{p}%\s+([\d.]+)(us|ms|s)\s*$", output, flags=re.MULTILINE)
        return float("nan") if found is None else float(found.group(1)) * _UNITS[found.group(2)]

    errors = sum(int(n) for n in re.findall(r"(?:connect|read|write|timeout) (\d+)", output))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    return rate, pct("50"), pct("99"), errors + (int(non2xx.group(1)) if non2xx else 0)


def run_wrk(target: str, port: int, keys: int, connections: int, seconds: float, op: str = "get",
            pid: int | None = None) -> LoadCell:
    """One wrk cell; pid: the server's process, whose tree's CPU time per request is reported."""
    script = _script(keys, op)
    before = tree_cpu_seconds(pid) if pid is not None else None
    try:
        out = subprocess.run(["wrk", "-t1", f"-c{connections}", f"-d{max(1, int(seconds))}s", "--latency",
                              "-s", str(script), f"http://127.0.0.1:{port}"],
                             capture_output=True, text=True, check=True, timeout=seconds + 60).stdout
    finally:
        script.unlink(missing_ok=True)
    spent = tree_cpu_seconds(pid) - before if pid is not None and before is not None else None
    rate, p50, p99, errors = parse_wrk(out)
    served = re.search(r"(\d+) requests in", out)
    count = int(served.group(1)) if served else 0
    cpu = spent / count * 1e6 if spent is not None and count else None
    return LoadCell(target, connections, rate, p50, p99, errors, op, cpu)


def wait_healthy(proc: subprocess.Popen, url: str, timeout: float = 90) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1).status_code in (200, 404):
                return
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"server did not answer {url} within {timeout:.0f} s")


def start_serve(settings: Settings, port: int, workers: int, fast_path: bool = True) -> subprocess.Popen:
    env = {**os.environ, **settings.to_env(), "DELTASTATE_FAST_PATH": "1" if fast_path else "0"}
    proc = subprocess.Popen([sys.executable, "-m", "deltastate.cli.main", "serve", "--port", str(port),
                             "--workers", str(workers), "--log-level", "warning"], env=env, start_new_session=True)
    wait_healthy(proc, f"http://127.0.0.1:{port}/health")
    return proc


FLOOR_KEYS = 1_000_000  # the floor's dict: a Python dict of 10M entries would cost gigabytes per worker


def start_floor(port: int, workers: int, keys: int) -> subprocess.Popen:
    env = {**os.environ, "DELTASTATE_FLOOR_KEYS": str(min(keys, FLOOR_KEYS))}
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "deltastate.bench.floor_app:app", "--port", str(port),
                             "--workers", str(workers), "--log-level", "warning", "--no-access-log"],
                            env=env, start_new_session=True)
    wait_healthy(proc, f"http://127.0.0.1:{port}/stores/player_stats/keys/player-000000000")
    return proc


def _tree(pid: int) -> list[int]:
    """A process and its descendants (uvicorn's workers), from /proc."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        try:
            for task in Path(f"/proc/{current}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def tree_rss_mb(pid: int) -> float:
    """Resident size of a process and its children (uvicorn workers), from /proc."""
    total = 0.0
    for current in _tree(pid):
        try:
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) / 1024
        except OSError:
            continue
    return total


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process and its children so far, from /proc/<pid>/stat."""
    ticks = 0
    for current in _tree(pid):
        try:
            # Fields after the command name (which may hold spaces): utime and stime are the 12th and 13th.
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def stop(proc: subprocess.Popen) -> None:
    import signal

    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(proc.pid, signal.SIGKILL)
