"""How the CLI reports deltastate's errors: one line on stderr, no traceback; exit status 1 for a
missing key (like a failed lookup), 2 for anything else deltastate refuses.

Commands wrap themselves with `reported` so they behave the same under `deltastate ...`, under
click's CliRunner in tests, and when another group (Airflow, a script) invokes them."""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

import click

from deltastate.config import Settings, load_settings
from deltastate.errors import DeltastateError, KeyNotFoundError

F = TypeVar("F", bound=Callable[..., Any])


class CommandError(click.ClickException):
    """A DeltastateError shown as `error: <msg>` on stderr, exit status 2."""

    exit_code = 2
    prefix = "error"

    def show(self, file: Any = None) -> None:
        click.echo(f"{self.prefix}: {self.format_message()}", err=True)


class NotFoundError(CommandError):
    exit_code = 1
    prefix = "not found"


def reported(func: F) -> F:
    """deltastate's own errors become a one-line message and an exit status instead of a traceback."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except KeyNotFoundError as exc:
            raise NotFoundError(str(exc)) from exc
        except DeltastateError as exc:
            raise CommandError(str(exc)) from exc

    return wrapper  # type: ignore[return-value]


def settings_of(ctx: click.Context) -> Settings:
    """Settings put on the context by a caller (tests, embedding), else from the environment."""
    obj = ctx.find_object(Settings)
    return obj if obj is not None else load_settings()


def run_guarded(command: click.Command, args: list[str] | None = None) -> None:
    """Entry point: commands not wrapped with `reported` still end in one line, not a traceback.
    args: the command line after the program's name (default: the process's)."""
    try:
        command.main(args=args, prog_name="deltastate" if args is not None else None, standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.exceptions.NoArgsIsHelpError as exc:
        click.echo(exc.format_message(), err=True)  # a group called bare: its help
        sys.exit(exc.exit_code)
    except click.UsageError as exc:
        # One line naming the bad argument, instead of click's usage block.
        where = f"; see '{exc.ctx.command_path} --help'" if exc.ctx is not None else ""
        click.echo(f"error: {exc.format_message().rstrip('.')}{where}", err=True)
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except KeyNotFoundError as exc:
        NotFoundError(str(exc)).show()
        sys.exit(1)
    except DeltastateError as exc:
        CommandError(str(exc)).show()
        sys.exit(2)
