"""`python -m deltastate.cli ...`, and the application file spark-submit runs
(`spark-submit .../deltastate/cli/__main__.py job run player_stats --report F`): the same click CLI
as the `deltastate` command, so a Spark driver takes exactly the arguments a user types."""

from deltastate.cli.main import main

if __name__ == "__main__":
    main()
