"""`deltastate soak crash`: kill -9 trials against a continuous run, then the state checks."""

from __future__ import annotations

import dataclasses
import sys
import uuid
from pathlib import Path

import click

from deltastate.config import load_settings


@click.group()
def soak() -> None:
    """Long crash trials; each prints its figures and exits 1 on a failed check."""


@soak.command("crash")
@click.option("--trials", default=20, show_default=True, help="kill -9 / restart cycles.")
@click.option("--events", default=40_000, show_default=True)
@click.option("--players", default=1_500, show_default=True)
@click.option("--seed", default=1, show_default=True)
def crash(trials: int, events: int, players: int, seed: int) -> None:
    """Run player_stats continuously in a subprocess, SIGKILL it before, during and after the Delta
    commit of a micro-batch, restart, TRIALS times; then compare the state with a fold of what was
    produced and look for duplicate changelog records. Fresh tables and topic under DELTASTATE_HOME/soak."""
    from deltastate.bench.soak import SoakOptions, run_crash_trials
    from deltastate.infra.broker import LocalBroker
    from deltastate.infra.spark import get_spark

    settings = load_settings()
    if settings.uses_local_broker:
        LocalBroker(settings).up()
    run_id = uuid.uuid4().hex[:8]
    workdir = Path(settings.home) / "soak" / run_id
    workdir.mkdir(parents=True)
    soak_settings = dataclasses.replace(settings, storage_root=str(workdir / "data"))
    options = SoakOptions(trials=trials, events=events, players=players, seed=seed)
    click.echo(f"soak crash: {trials} trials, {events:,} events, {players:,} players; logs in {workdir}")
    spark = get_spark(soak_settings, "deltastate-soak")
    result, _ = run_crash_trials(soak_settings, f"soak-{run_id}", options, workdir, spark,
                                 on_trial=lambda t: click.echo(t.line()))
    for line in result.lines()[len(result.trials):]:
        click.echo(line)
    if not result.ok:
        click.echo(f"wrong keys: {result.wrong_keys}", err=True)
        sys.exit(1)

