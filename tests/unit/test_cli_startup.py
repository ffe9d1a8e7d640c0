"""What starting the CLI imports: the group loads a command's module only when that command runs, and
no command module loads the engine's libraries (pyspark, pandas, delta, great_expectations, airflow)
at import. Checked in new processes, from their sys.modules at exit, so whatever this test process
has imported already hides nothing. (A snapshot read through the CLI is checked the same way
in tests/integration/test_cli_commands.py.)"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from deltastate.cli.main import COMMANDS

HEAVY = {"pyspark", "pandas", "delta", "great_expectations", "airflow"}
# Runs `deltastate ARGS...` (or imports a module) and prints the modules loaded, as the process ends.
DRIVER = """
import atexit, json, sys
atexit.register(lambda: print("MODULES " + json.dumps(sorted(sys.modules)), file=sys.stderr))
if sys.argv[1] == "import":
    __import__(sys.argv[2])
else:
    sys.argv = ["deltastate", *sys.argv[1:]]
    from deltastate.cli.main import main
    main()
"""


def imported_by(*args: str) -> set[str]:
    proc = subprocess.run([sys.executable, "-c", DRIVER, *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [line] = [x for x in proc.stderr.splitlines() if x.startswith("MODULES ")]
    return set(json.loads(line.removeprefix("MODULES ")))


def top_level(names: set[str]) -> set[str]:
    return {n.split(".")[0] for n in names}


def test_a_command_imports_its_own_module_only() -> None:
    names = imported_by("get", "--help")
    assert "deltastate.cli.query_cmd" in names
    others = {target.split(":")[0] for target in COMMANDS.values()} - {"deltastate.cli.query_cmd"}
    assert not names & others, sorted(names & others)
    assert not top_level(names) & HEAVY


@pytest.mark.parametrize("module", sorted({target.split(":")[0] for target in COMMANDS.values()}))
def test_command_modules_import_no_engine_library(module: str) -> None:
    names = imported_by("import", module)
    assert module in names
    assert not top_level(names) & HEAVY, sorted(top_level(names) & HEAVY)


def test_the_command_table_names_each_command_as_it_is_called() -> None:
    from click.testing import CliRunner

    from deltastate.cli.main import cli

    listed = CliRunner().invoke(cli, ["--help"])
    assert listed.exit_code == 0, listed.output
    for name in COMMANDS:
        assert re.search(rf"^\s+{name}\s", listed.output, re.M), name
