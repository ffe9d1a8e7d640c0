"""`deltastate`: one command line for the platform; each command group lives in its own module.

The group knows its commands by name and imports a command's module only when that command runs
(or when help lists it): a snapshot read must not pay for pandas, pyspark and the engine, which
other commands need. Command modules keep their own heavy imports inside the functions that use
them, so listing every command for `--help` stays cheap too."""

from __future__ import annotations

import sys

import click

from deltastate.cli.errors import run_guarded

# name -> "module:attribute" of the click command; the order is the order `--help` lists them in.
COMMANDS: dict[str, str] = {
    "infra": "deltastate.cli.infra_cmd:infra",
    "produce": "deltastate.cli.produce_cmd:produce",
    "run": "deltastate.cli.run_cmd:run",
    "snapshot": "deltastate.cli.query_cmd:snapshot",
    "get": "deltastate.cli.query_cmd:get_cmd",
    "rank": "deltastate.cli.query_cmd:rank_cmd",
    "top": "deltastate.cli.query_cmd:top_cmd",
    "range": "deltastate.cli.query_cmd:range_cmd",
    "all": "deltastate.cli.query_cmd:all_cmd",
    "windows": "deltastate.cli.query_cmd:windows_cmd",
    "sessions": "deltastate.cli.query_cmd:sessions_cmd",
    "sql": "deltastate.cli.query_cmd:sql_cmd",
    "serve": "deltastate.cli.serve_cmd:serve",
    "compact": "deltastate.cli.maintenance_cmd:compact",
    "cleanup": "deltastate.cli.maintenance_cmd:cleanup",
    "restore": "deltastate.cli.restore_cmd:restore",
    "inspect": "deltastate.cli.inspect_cmd:inspect",
    "migrate": "deltastate.cli.migrate_cmd:migrate",
    "job": "deltastate.cli.job_cmd:job",
    "driver": "deltastate.cli.driver_cmd:driver",
    "bench": "deltastate.cli.bench_cmd:bench",
    "soak": "deltastate.cli.soak_cmd:soak",
    "demo": "deltastate.cli.demo_cmd:demo",
}


class LazyGroup(click.Group):
    """A click group whose commands are imported on first use from COMMANDS."""

    def __init__(self, *args: object, lazy: dict[str, str], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*self.lazy, *(name for name in super().list_commands(ctx) if name not in self.lazy)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        target = self.lazy.get(cmd_name)
        if target is None:
            return None
        module_name, attribute = target.split(":")
        # An import statement's machinery, not importlib's: `python -X importtime` then shows the
        # command's module and what it loads.
        __import__(module_name)
        command = getattr(sys.modules[module_name], attribute)
        if command.name != cmd_name:  # the table and the module disagree: a bug, not a user error
            raise RuntimeError(f"{target} is the command {command.name!r}, not {cmd_name!r}")
        self.commands[cmd_name] = command
        return command


@click.group(cls=LazyGroup, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Kafka-Streams-style state stores on Spark, Delta and DuckDB."""


def main() -> None:
    run_guarded(cli)


if __name__ == "__main__":
    main()
