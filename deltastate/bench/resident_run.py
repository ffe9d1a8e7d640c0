"""deltastate's side of `deltastate bench peers --resident`: the store's run in a resident driver
(deltastate/driver) that has already run a store of the same definition over a warm-up backlog.

The bench copies the schemas into a folder of its own with one more store, `<store>_warmup`: the
same definition under another name, so it has its own checkpoint and tables, and a windowed store's
stream time from the warm-up leaves the measured backlog's records on time. A driver is started for
the bench's storage root; `deltastate run <store>_warmup --once --topic WARM_UP` warms it (untimed),
then `deltastate run <store> --once --topic TOPIC --json`, a new client process, is timed from its
start: what a user waits for when a backlog arrives at a home whose driver is warm.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from deltastate.config import Settings
from deltastate.errors import InfraError


def warm_up_schemas(settings: Settings, store: str, folder: Path) -> str:
    """A copy of the schemas with `<store>_warmup` added; the warm-up store's name."""
    shutil.copytree(settings.schemas_dir, folder)
    name = f"{store}_warmup"
    text = (folder / "stores" / f"{store}.yaml").read_text()
    renamed, count = re.subn(rf"(?m)^name:\s*{re.escape(store)}\s*$", f"name: {name}", text)
    if count != 1:
        raise InfraError(f"the definition of {store!r} in {settings.schemas_dir} has no `name: {store}` line")
    (folder / "stores" / f"{name}.yaml").write_text(renamed)
    return name


def run_resident(settings: Settings, store: str, warm_up_topic: str, topic: str, root: Path) -> dict:
    """The measured run's `deltastate run --json` figures plus wall_seconds from the client's start,
    after a warm-up run in the same resident driver; both under root (storage and schemas)."""
    cli = str(Path(sys.executable).parent / "deltastate")
    env = {**os.environ, **settings.to_env(), "DELTASTATE_STORAGE": str(root / "data"),
           "DELTASTATE_SCHEMAS": str(root / "schemas")}
    warm_up_store = warm_up_schemas(settings, store, root / "schemas")
    if _run(cli, ["driver", "status"], env, check=False).returncode == 0:
        raise InfraError(f"a resident driver already serves {settings.home}; `deltastate driver stop` it "
                         "before `deltastate bench peers --resident`, which starts its own")
    _run(cli, ["driver", "start"], env)
    try:
        _run(cli, ["run", warm_up_store, "--once", "--topic", warm_up_topic, "--quiet"], env)
        started = time.monotonic()
        done = _run(cli, ["run", store, "--once", "--topic", topic, "--quiet", "--json"], env)
        wall = time.monotonic() - started
        if "in the resident driver" not in done.stdout:
            raise InfraError(f"`deltastate run {store}` did not run in the resident driver: {done.stderr.strip()[-500:]}")
    finally:
        _run(cli, ["driver", "stop"], env, check=False)
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "wall_seconds": wall}


def _run(cli: str, args: list[str], env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([cli, *args], env=env, capture_output=True, text=True, timeout=3600)
    if check and done.returncode != 0:
        raise InfraError(f"`deltastate {' '.join(args)}` failed (exit {done.returncode}): {done.stderr.strip()[-1500:]}")
    return done
