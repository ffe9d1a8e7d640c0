"""bench ingest's key count when --keys is not given: by store type, and a clear error otherwise."""

from __future__ import annotations

import pytest

from deltastate.bench.ingest import default_keys
from deltastate.stores.backends import store_types


def test_every_store_type_has_a_default():
    assert {t: default_keys(t) for t in store_types()} == {"key_value": 100_000, "window": 1_000, "session": 1_000}


def test_an_unknown_type_is_refused_by_name():
    with pytest.raises(ValueError, match="'queue'"):
        default_keys("queue")
