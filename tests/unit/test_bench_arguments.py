"""Bench commands refuse arguments that cannot work, naming what is wrong (exit 2)."""


def test_floor_alone_and_against_the_floor_are_refused_together() -> None:
    from click.testing import CliRunner

    from deltastate.cli.bench_cmd import bench

    result = CliRunner().invoke(bench, ["freshness", "--floor", "--against-floor"])
    assert result.exit_code == 2 and "give one of them" in result.output


def test_the_warm_run_names_its_arguments_when_given_the_wrong_number(capsys) -> None:
    from deltastate.bench.warm_run import main

    assert main(["player_stats"]) == 2
    assert "usage: python -m deltastate.bench.warm_run STORE WARM_UP_TOPIC TOPIC" in capsys.readouterr().err


def test_the_floor_run_names_its_arguments_when_given_the_wrong_number(capsys) -> None:
    from deltastate.bench.floor import main

    assert main(["2000", "60"]) == 2
    assert "usage: python -m deltastate.bench.floor RATE SECONDS TRIGGER WARMUP_SECONDS none|delta|plan|plan-delta" in (
        capsys.readouterr().err)
    assert main(["2000", "60", "1s", "0", "parquet"]) == 2  # a sink it does not know
