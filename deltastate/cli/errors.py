"""How the CLI reports deltastate's errors: one line on stderr, exit code 1 for a missing key
(like a failed lookup), 2 for everything else deltastate refuses."""

from __future__ import annotations

import sys

import click

from deltastate.errors import DeltastateError, KeyNotFoundError


def run_guarded(command: click.Command) -> None:
    try:
        command.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except KeyNotFoundError as exc:
        click.echo(f"not found: {exc}", err=True)
        sys.exit(1)
    except DeltastateError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
