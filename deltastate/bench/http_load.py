"""HTTP load for the query bench: wrk (a real load generator, C, one connection per client) against
`deltastate serve --workers N` and against the bare-stack floor (floor_app.py), random keys per
request; the servers' resident size from /proc."""

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
    target: str  # serve | floor
    connections: int
    requests_per_s: float
    p50_ms: float
    p99_ms: float
    errors: int

    def line(self) -> str:
        return (f"  wrk {self.target:<6} get  c={self.connections:<3} {self.requests_per_s:>9,.0f} req/s  "
                f"p50 {self.p50_ms:8.2f} ms  p99 {self.p99_ms:8.2f} ms" + (f"  errors {self.errors}" if self.errors else ""))


def wrk_available() -> bool:
    return shutil.which("wrk") is not None


def _script(keys: int) -> Path:
    """A wrk Lua script asking for a random key of the snapshot per request."""
    text = ("math.randomseed(os.time())\n"
            "request = function()\n"
            f"  return wrk.format('GET', string.format('/stores/player_stats/keys/player-%09d', math.random(0, {keys - 1})))\n"
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


def run_wrk(target: str, port: int, keys: int, connections: int, seconds: float) -> LoadCell:
    script = _script(keys)
    try:
        out = subprocess.run(["wrk", "-t1", f"-c{connections}", f"-d{max(1, int(seconds))}s", "--latency",
                              "-s", str(script), f"http://127.0.0.1:{port}"],
                             capture_output=True, text=True, check=True, timeout=seconds + 60).stdout
    finally:
        script.unlink(missing_ok=True)
    rate, p50, p99, errors = parse_wrk(out)
    return LoadCell(target, connections, rate, p50, p99, errors)


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


def start_serve(settings: Settings, port: int, workers: int) -> subprocess.Popen:
    env = {**os.environ, **settings.to_env()}
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


def tree_rss_mb(pid: int) -> float:
    """Resident size of a process and its children (uvicorn workers), from /proc."""
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        try:
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) / 1024
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except OSError:
            continue
        todo += [int(c) for c in children]
    return total


def stop(proc: subprocess.Popen) -> None:
    import signal

    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(proc.pid, signal.SIGKILL)
