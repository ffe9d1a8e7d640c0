"""One writer per checkpoint: while an old writer process lives (an orphaned driver of a killed
Airflow worker), a new run of the same store refuses to start a second writer and names the holder;
once the old process is gone the run proceeds, from the same checkpoint, and loses nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from support.reference import expected
from support.store_checks import STORE, assert_counts, generated, new_topic, produce

from deltastate.engine import run_store
from deltastate.engine.common.writer_lock import LOCK_WAIT_ENV, WriterBusyError, lock_path, release_checkpoint

pytestmark = pytest.mark.integration

HOLDER = """
import sys, time
from deltastate.config import load_settings
from deltastate.engine.common.writer_lock import claim_checkpoint
claim_checkpoint(load_settings(), sys.argv[1], wait_s=0)
print("held", flush=True)
time.sleep(600)
"""


def test_a_second_writer_waits_for_the_live_one_then_fails_naming_it(make_settings, broker, spark, topic, monkeypatch):
    settings = make_settings("writer")
    ref = new_topic(settings, broker, topic)
    produce(settings, topic, generated(1_000, 80, seed=31), ref)
    env = {**os.environ, "DELTASTATE_HOME": str(settings.home), "DELTASTATE_STORAGE": settings.storage_root,
           "KAFKA_BOOTSTRAP": settings.kafka_bootstrap}
    old = subprocess.Popen([sys.executable, "-c", HOLDER, STORE], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert old.stdout.readline().strip() == "held"
        monkeypatch.setenv(LOCK_WAIT_ENV, "2")
        with pytest.raises(WriterBusyError, match=rf"store '{STORE}'.*pid {old.pid}") as caught:
            run_store(settings, STORE, once=True, topic=topic)
        assert caught.value.path == lock_path(settings, STORE)
        # Nothing was written by the refused run: no changelog table, no checkpoint.
        assert not os.path.exists(settings.table_path(STORE, "changelog"))
        assert not os.path.exists(settings.checkpoint_path(STORE))
    finally:
        old.send_signal(signal.SIGKILL)  # the old driver dies; the kernel drops its lock
        old.wait(timeout=30)
    try:
        result = run_store(settings, STORE, once=True, topic=topic)
        assert_counts(expected(ref.records, settings.max_value_bytes), result, spark, settings)
    finally:
        assert release_checkpoint(settings, STORE)
