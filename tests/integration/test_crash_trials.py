"""kill -9 trials against a continuous `deltastate run` (a real CLI process with its Spark JVM, the
real broker and Delta): killed before, during and after the Delta commit of a micro-batch,
restarted, three times; then the final state equals the independent reference (tests/reference.py),
the changelog holds no duplicate (epoch, batch, key) and the audit counted every record once.
`deltastate soak crash --trials 20` runs the same driver longer."""


from pathlib import Path

import pytest
from support.reference import ReferenceTopic, expected
from support.store_checks import PARTITIONS, STORE, assert_changelog_unique, assert_counts, assert_state, published_state

from deltastate.bench.soak import SoakOptions, run_crash_trials
from deltastate.ingest.partitioner import partition_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]


def test_kill9_trials_match_reference(broker: str, spark, make_settings, topic: str, tmp_path: Path) -> None:
    settings = make_settings()
    assert settings.kafka_bootstrap == broker
    options = SoakOptions(trials=3, events=12_000, players=800, tombstones=0.03, seed=23, chunk=150,
                          partitions=PARTITIONS, store=STORE)
    trials = []
    result, produced = run_crash_trials(settings, topic, options, tmp_path, spark, on_trial=trials.append)
    print("\n".join(result.lines()))  # shown with -s, or on failure

    # Every moment is hit once (the soak command runs more); the kills in the trials' order are the ones aimed at.
    assert [t.moment for t in trials[:3]] == ["before", "during", "after"] and len(trials) == 3
    ref = ReferenceTopic(PARTITIONS, partition_for)
    ref.append(produced)
    exp = expected(ref.records, settings.max_value_bytes)
    assert result.produced == len(produced) == exp.records_in and exp.tombstones >= 10
    assert_counts(exp, None, spark, settings)  # audit: each record once
    assert_changelog_unique(spark, settings)
    assert result.duplicates == 0 and not result.wrong_keys and result.ok
    assert_state(published_state(spark, settings), exp)
