# deltastate: the two commands a new machine needs are `make demo` and `make test`.
SHELL := /bin/bash
export PATH := $(HOME)/.local/bin:$(PATH)
UV := uv run --frozen
PYTEST_ARGS ?=

.PHONY: setup demo test test-unit bench bench-query soak clean down airflow

setup:            ## install uv, the locked environment, jars and Spark functions
	bash scripts/setup.sh

demo: setup       ## the leaderboard end to end: broker, produce, run, publish, query
	$(UV) deltastate demo

# setup installs Debian chromium for the browser test. No comment after the value: make would keep
# the spaces before it, and "1  " is not "1" to setup.sh.
test: export DELTASTATE_BROWSER := 1
# Two pytest workers (pytest-xdist), each test file on one worker with its own broker and Spark
# session: many tests wait on a broker, a scheduler or a child process, and the other worker uses
# that time. TEST_WORKERS=0 runs in this process alone.
TEST_WORKERS ?= 2
test: setup       ## every test, through the real broker, Spark, Delta and DuckDB (24-34 min on 2 cores, up to 48 on a slower machine of that size; its budget 45)
	$(UV) pytest -m "not soak" -q -p no:cacheprovider --durations=40 -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

test-unit: setup  ## pure functions only
	$(UV) pytest tests/unit -q -p no:cacheprovider

bench: setup      ## ingest benchmark (printed figures)
	$(UV) deltastate bench ingest

bench-query: export DELTASTATE_WRK := 1
bench-query: setup  ## query service: read index, wrk against `serve` and the bare FastAPI floor (printed figures)
	$(UV) deltastate bench query

soak: setup       ## 20 kill -9 trials, then the long test variants (60 s of readers during publishes)
	$(UV) deltastate soak crash --trials 20
	$(UV) pytest -m soak -q -p no:cacheprovider

airflow: setup    ## Airflow 3 UI on :8080 (standalone) with dags/ and plugins/, and the local broker
	bash scripts/airflow.sh

down:             ## stop the local broker
	$(UV) deltastate infra down

clean: down
	rm -rf .deltastate
