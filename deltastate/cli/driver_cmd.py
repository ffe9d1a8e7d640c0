"""`deltastate driver serve|start|stop|status`: the home's resident Spark driver (deltastate/driver).

While a driver serves the home, `deltastate run STORE --once` (unless --in-process) and the Airflow
operator's actions (DELTASTATE_SPARK_DEPLOY=resident) run in it instead of in a new process, and
skip a Spark session's start and a cold JIT."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import click

from deltastate.cli.errors import reported
from deltastate.config import load_settings
from deltastate.errors import InfraError


@click.group()
def driver() -> None:
    """The home's resident Spark driver, which runs `run --once` and Airflow's actions warm."""


@driver.command()
@reported
def serve() -> None:
    """Run the driver in the foreground until `deltastate driver stop`."""
    from deltastate.cli.errors import run_guarded
    from deltastate.cli.main import cli
    from deltastate.driver.server import serve as serve_driver

    serve_driver(load_settings(), lambda argv: run_guarded(cli, argv))


@driver.command()
@click.option("--timeout", type=click.FloatRange(min=1), default=300, show_default=True,
              help="Seconds to wait for the driver to serve.")
@reported
def start(timeout: float) -> None:
    """Start the driver in the background; its output goes to HOME/driver/driver.log."""
    from deltastate.driver import client
    from deltastate.driver.protocol import DriverPaths

    settings = load_settings()
    found = client.status(settings)
    if found is not None:
        click.echo(f"resident driver pid {found['pid']} already serves {settings.home}")
        return
    paths = DriverPaths.of(settings)
    paths.folder.mkdir(parents=True, exist_ok=True)
    with open(paths.log, "ab") as log:
        process = subprocess.Popen([sys.executable, "-m", "deltastate.cli", "driver", "serve"], stdin=subprocess.DEVNULL,
                                   stdout=log, stderr=log, start_new_session=True, env=os.environ.copy())
    deadline = time.monotonic() + timeout
    while (found := client.status(settings)) is None:
        if process.poll() is not None:
            tail = paths.log.read_text(errors="replace").strip().splitlines()[-1:]
            raise InfraError(f"the resident driver exited (code {process.returncode}) before serving: "
                             f"{tail[0] if tail else 'no output'}; see {paths.log}")
        if time.monotonic() > deadline:
            process.terminate()
            raise InfraError(f"the resident driver did not serve within {timeout:.0f} s; see {paths.log}")
        time.sleep(0.2)
    click.echo(f"resident driver pid {found['pid']} serves {settings.home} (log: {paths.log})")


@driver.command()
@click.option("--timeout", type=click.FloatRange(min=1), default=3600, show_default=True,
              help="Seconds to wait for a running command to end.")
@reported
def stop(timeout: float) -> None:
    """Stop the driver once its running command ends."""
    from deltastate.driver import client

    settings = load_settings()
    found = client.stop(settings)
    if found is None:
        raise InfraError(f"no resident driver serves {settings.home}")
    if found["running"]:
        click.echo(f"waiting for `deltastate {found['running']}` to end")
    deadline = time.monotonic() + timeout
    while _alive(int(found["pid"])):
        if time.monotonic() > deadline:
            raise InfraError(f"the resident driver (pid {found['pid']}) is still running its command after "
                             f"{timeout:.0f} s; it stops when the command ends")
        time.sleep(0.2)
    click.echo(f"resident driver pid {found['pid']} stopped after {found['commands']} commands")


@driver.command()
@reported
def status() -> None:
    """The driver's pid, uptime and commands; exit 2 when none serves the home."""
    from deltastate.driver import client

    settings = load_settings()
    found = client.status(settings)
    if found is None:
        raise InfraError(f"no resident driver serves {settings.home}; start one with `deltastate driver start`")
    doing = f"running `deltastate {found['running']}`" if found["running"] else "idle"
    click.echo(f"resident driver pid {found['pid']} serves {settings.home}: up {found['uptime_s']:.0f} s, "
               f"{found['commands']} commands, {doing} (log: {found['log']})")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:
        return ") Z" not in open(f"/proc/{pid}/stat").read()  # an exited child of ours, not yet reaped
    except OSError:
        return True
