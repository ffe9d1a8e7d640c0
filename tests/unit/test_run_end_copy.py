"""The audit copy that ends a run (engine/run.py copy_after_run): after a run that succeeded its
failure fails the run; after a failed run it never hides why the run failed."""

from __future__ import annotations

import logging

import pytest

from deltastate.engine.run import copy_after_run


class CopyFailed(RuntimeError):
    pass


def failing_copy() -> None:
    raise CopyFailed("intake table unreachable")


def test_a_failed_copy_after_a_good_run_fails_the_run() -> None:
    with pytest.raises(CopyFailed, match="unreachable"):
        copy_after_run("player_stats", failing_copy, None)


def test_the_copy_runs_after_a_good_run() -> None:
    ran: list[str] = []
    copy_after_run("player_stats", lambda: ran.append("copied"), None)
    assert ran == ["copied"]


def test_the_copy_runs_after_a_failed_run_too() -> None:
    ran: list[str] = []
    copy_after_run("player_stats", lambda: ran.append("copied"), ValueError("bad batch"))
    assert ran == ["copied"]


def test_a_failed_copy_after_a_failed_run_leaves_the_runs_error_first(caplog: pytest.LogCaptureFixture) -> None:
    run_error = ValueError("batch 7 failed: state store unavailable")
    with caplog.at_level(logging.WARNING):
        copy_after_run("player_stats", failing_copy, run_error)  # does not raise: the caller raises run_error
    assert any("intake table unreachable" in note and "player_stats" in note for note in run_error.__notes__)
    assert "copying the run's audits failed" in caplog.text and "player_stats" in caplog.text
