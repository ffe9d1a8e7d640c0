"""Restore benchmark entry point: `python bench/restore.py [--keys N] [--updates U]`, the same as
`deltastate bench restore` (deltastate/bench/restore.py holds the logic)."""

from deltastate.cli.bench_cmd import restore

if __name__ == "__main__":
    restore()
