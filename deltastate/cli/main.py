"""`deltastate`: one command line for the platform; each command group lives in its own module."""

from __future__ import annotations

import click

from deltastate.cli.errors import run_guarded


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Kafka-Streams-style state stores on Spark, Delta and DuckDB."""


def _register() -> None:
    from deltastate.cli import bench_cmd, demo_cmd, inspect_cmd, job_cmd, produce_cmd, query_cmd, restore_cmd, run_cmd, soak_cmd
    from deltastate.cli.infra_cmd import infra
    from deltastate.cli.serve_cmd import serve as serve_command

    cli.add_command(infra)
    cli.add_command(produce_cmd.produce)
    cli.add_command(run_cmd.run)
    cli.add_command(demo_cmd.demo)
    cli.add_command(bench_cmd.bench)
    cli.add_command(restore_cmd.restore)
    cli.add_command(soak_cmd.soak)
    cli.add_command(job_cmd.job)
    cli.add_command(inspect_cmd.inspect)
    from deltastate.cli.migrate_cmd import migrate
    cli.add_command(migrate)
    query_cmd.register(cli)
    from deltastate.cli.maintenance_cmd import register as register_maintenance
    register_maintenance(cli)
    cli.add_command(serve_command)


_register()


def main() -> None:
    run_guarded(cli)


if __name__ == "__main__":
    main()
