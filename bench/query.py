"""Query benchmark entry point for people who run benchmarks as scripts: the same as
`deltastate bench query` (see deltastate/bench/query.py for what is measured).

    uv run --frozen python bench/query.py --keys 1000000
    uv run --frozen python bench/query.py --keys 10000000 --seconds 5
"""

from deltastate.cli.bench_cmd import query

if __name__ == "__main__":
    query()
