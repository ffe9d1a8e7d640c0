"""`deltastate restore STORE`: rebuild a lost or corrupt checkpoint from the store's changelog."""

from __future__ import annotations

import click

from deltastate.config import load_settings


class _ProgressListener:
    """The restore listener drawn as a progress bar over the slices of the state."""

    def __init__(self) -> None:
        self.restored = 0

    def on_start(self, store: str, from_changelog_version: int | None, mode: str) -> None:
        where = "an empty changelog" if from_changelog_version is None else f"changelog version {from_changelog_version}"
        click.echo(f"restoring {store} ({mode}) from {where}")

    def on_batch(self, records_restored: int, partition: int | None) -> None:
        self.restored += records_restored
        click.echo(f"  partition {partition}: restored {records_restored:>10,} records ({self.restored:,} so far)")

    def on_end(self, total_records: int, seconds: float) -> None:
        click.echo(f"  done: {total_records:,} records in {seconds:.1f} s")


@click.command()
@click.argument("store")
def restore(store: str) -> None:
    """Rebuild STORE's checkpoint from its changelog and record where the next run resumes.

    Stop the store's stream first. The old checkpoint folder is kept beside the new one. A store
    without changelog (changelog.enabled: false) is rebuilt by replaying its source topic instead."""
    from deltastate.maintenance.restore import restore_store

    report = restore_store(load_settings(), store, listener=_ProgressListener())
    if report.moved_checkpoint:
        click.echo(f"old checkpoint moved to {report.moved_checkpoint}")
    if report.orphans:
        click.echo(f"removed {report.orphans} dead letters and changelog rows of batches without an audit row")
    if report.mode == "replay":
        click.echo(f"{store} keeps no changelog: the next run replays the topic from its earliest offsets; "
                   f"{report.cleared} audit rows and dead letters were deleted to start over with it")
    offsets = ", ".join(f"{p}:{o}" for p, o in sorted(report.starting_offsets.items())) or "earliest"
    click.echo(f"{store}: new lineage {report.lineage_id} (epoch {report.epoch}); the next run resumes at "
               f"offsets {offsets}; run `deltastate run {store}`")
