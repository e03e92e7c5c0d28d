"""A failed job is one log line at the default level; its traceback is a DEBUG record.

An in-process daemon (``run --once``) whose clean executor fails with an error that is no fault of
the table (``failed``, retried with backoff): the job's ``hoodied.job`` records at WARNING and above
carry no traceback, the traceback is there at DEBUG, and the loop's ``job ended`` line says what
failed.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.service.daemon.test_table_controls import (
    _failing_cleans,
    _isolated_settings,
    _once,
    _settings,
    _table,
)

__all__ = ["_isolated_settings"]  # autouse: no HOODIED_* setting of the machine leaks in


def test_a_failed_job_logs_its_traceback_at_debug_only(tmp_path: Path,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    table = _table(tmp_path)
    settings = _settings(tmp_path, table)
    with caplog.at_level(logging.DEBUG):
        daemon, code = _once(settings, registry=_failing_cleans())
    assert code == 1
    (failed,) = [o for o in daemon.tables[str(table)].outcomes if o["kind"] == "execute"]
    assert failed["outcome"] == "failed" and "cannot decode the plan's file" in failed["message"]
    job = [r for r in caplog.records if r.name == "hoodied.job"]
    assert not [r for r in job if r.levelno >= logging.WARNING], job
    traced = [r for r in job if r.exc_info]
    assert len(traced) == 1 and traced[0].levelno == logging.DEBUG
