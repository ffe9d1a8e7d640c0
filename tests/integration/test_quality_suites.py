"""Pure parts of the quality layer: suite expansion per store type and the batch-order column."""

from __future__ import annotations

from datetime import datetime

import pandas as pd
import pytest

from deltastate.config import load_settings
from deltastate.errors import ConfigError
from deltastate.quality.frames import batch_order_ok, event_time_bounds
from deltastate.quality.suites import SUITES, SuiteSpec, expand, load_spec
from deltastate.stores import list_stores, load_store


@pytest.fixture(scope="module")
def settings():
    return load_settings({})


def test_every_suite_expands_for_every_declared_store(settings):
    for name in list_stores(settings):
        store = load_store(settings, name)
        windowed = store.type in ("window", "session")
        for suite in SUITES:
            exps = expand(load_spec(settings, suite), store, {"live_keys": 7, **event_time_bounds()})
            text = repr(exps)
            assert "$" not in text and "{field}" not in text, (name, suite, text)
            types = [e.type for e in exps]
            if suite == "snapshot":
                assert ("expect_column_pair_values_a_to_be_greater_than_b" in types) == windowed
                [unique] = [e for e in exps if "unique" in e.type]
                if windowed:
                    assert unique.kwargs == {"column_list": ["key", "window_start", "window_end"]}
                else:
                    assert (unique.type, unique.kwargs) == ("expect_column_values_to_be_unique", {"column": "key"})
                assert {"type": "expect_table_row_count_to_equal", "value": 7} in [
                    {"type": e.type, **e.kwargs} for e in exps]
            if suite == "events":
                required = [e.kwargs["column"] for e in exps if e.type == "expect_column_to_exist"]
                assert required == list(store.source.required)


def test_missing_values_and_unknown_rules_are_refused(settings):
    store = load_store(settings, "player_stats")
    with pytest.raises(ConfigError, match="live_keys"):
        expand(load_spec(settings, "snapshot"), store, {})
    spec = SuiteSpec("x", "", ({"for_each": "nope", "type": "t", "kwargs": {}},))
    with pytest.raises(ConfigError, match="nope"):
        expand(spec, store)


def test_batch_order_flags_only_a_query_going_back():
    t = [datetime(2026, 1, 1, 0, 0, s) for s in range(6)]
    frame = pd.DataFrame({
        "lineage_id": ["a", "a", "a", "b", "b", "a"],
        "batch_id": [0, 1, 1, 5, 2, 0],
        "write_time": [t[0], t[1], t[1], t[0], t[1], t[5]],
    })
    # a: 0, 1, 1 fine, then batch 0 written last (went back); b: 5 then 2 (went back)
    assert batch_order_ok(frame).tolist() == [True, True, True, True, False, False]
