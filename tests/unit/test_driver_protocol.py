"""The resident driver's pure parts: the command line `run --once` sends a driver (it must give the
command the same parameters again), what the driver refuses, and how fingerprints are compared."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from deltastate.cli.main import cli
from deltastate.driver import client
from deltastate.driver.client import command_line
from deltastate.driver.protocol import differences, refusal


def sent_for(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], dict[str, object]]:
    """What `deltastate ARGV` sends a driver, and the parameters click gave the command."""
    seen: dict[str, object] = {}

    def line(ctx: click.Context) -> list[str]:
        seen["params"] = dict(ctx.params)
        return command_line(ctx)

    def send(_settings: object, sent: list[str], _write: object = None) -> int:
        seen["argv"] = sent
        return 0

    monkeypatch.setattr(client, "command_line", line)
    monkeypatch.setattr(client, "send_command", send)
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 0, result.output
    return seen["argv"], seen["params"]  # type: ignore[return-value]


@pytest.mark.parametrize("argv", [
    ["run", "player_stats"],
    ["run", "player_stats", "--once", "--json", "--quiet", "--topic", "t-1", "--max-offsets-per-trigger", "500"],
    ["run", "trade_stats", "--schema-version", "2", "--trigger", "5s", "--json"],
])
def test_the_command_line_sent_gives_the_command_its_parameters_again(argv: list[str], monkeypatch) -> None:
    sent, params = sent_for(argv, monkeypatch)
    assert sent[:2] == argv[:2]
    assert sent_for(sent, monkeypatch) == (sent, params)
    assert all(option in sent for option in argv if option.startswith("--"))


@pytest.mark.parametrize(("argv", "runs"), [
    (["run", "player_stats", "--once"], True),
    (["job", "compact", "player_stats", "--report", "r"], True),
    (["run", "player_stats", "--continuous"], False),
    (["serve"], False),
    (["driver", "stop"], False),
    ([], False),
])
def test_the_driver_runs_once_runs_and_jobs_only(argv: list[str], runs: bool) -> None:
    found = refusal(argv)
    assert (found is None) == runs
    if not runs:
        assert found.endswith(f"not `deltastate {' '.join(argv)}`")


def test_differences_name_each_differing_part() -> None:
    ours = {"settings": {"DELTASTATE_HOME": "/a", "KAFKA_BOOTSTRAP": "b"}, "python": "p", "code": "1"}
    assert differences(ours, ours) == []
    theirs = {"settings": {"DELTASTATE_HOME": "/a", "KAFKA_BOOTSTRAP": "c", "X": "1"}, "python": "p", "code": "2"}
    assert differences(ours, theirs) == ["code", "settings.KAFKA_BOOTSTRAP", "settings.X"]


@pytest.mark.parametrize("store", ["player_stats", "trade_stats", "pulse_counts", "user_sessions"])
def test_the_resident_benchs_warm_up_store_is_the_store_under_another_name(store: str, tmp_path) -> None:
    import dataclasses

    from deltastate.bench.resident_run import warm_up_schemas
    from deltastate.config import load_settings
    from deltastate.stores import load_store

    settings = load_settings({"DELTASTATE_HOME": str(tmp_path / "home")})
    name = warm_up_schemas(settings, store, tmp_path / "schemas")
    copied = dataclasses.replace(settings, schemas_dir=tmp_path / "schemas")
    original, warm_up = load_store(settings, store), load_store(copied, name)
    assert name == f"{store}_warmup" and warm_up.name == name and warm_up.storage != original.storage
    assert dataclasses.replace(warm_up, name=store) == original
