"""A job that fails on a corrupt file says so in one line, not in Spark's stack traces.

A real ``hoodied execute`` (its own process, so its local Spark JVM writes onto the process's
standard error) on a merge-on-read table whose planned base file is truncated: at the default level
standard error holds the progress lines and the one ``hoodied: error:`` line, none of the JVM's
task-failure reports, Java stacks or the Spark task's Python traceback; ``--debug`` still shows
them. The daemon (``run --once``, JSON logs) on the same table: one ``job ended`` error line for
the failed job (and the quarantine it causes), no Spark record at WARNING or above.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from hoodied.service.cli.main import TROUBLESHOOTING_URL
from tests.executors.test_compaction_bad_input import PROJECT, _schedule, _state
from tests.helpers.mor_tables import written_mor_table

SETTINGS = ["--clock-skew-ms", "5", "--heartbeat-interval-ms", "100", "--spark", "local[2]"]
_CONSOLE_INFO = re.compile(r"^\S+Z \[info\s*\] ")


def _corrupt_table(root: Path) -> tuple[str, str]:
    """A table with a compaction planned over a base file cut in half: (instant, the file's name)."""
    written_mor_table(root)
    t, ops = _schedule(root)
    op = next(o for o in ops if o.get("dataFilePath"))
    base = root / op["partitionPath"] / op["dataFilePath"]
    good = base.read_bytes()
    base.write_bytes(good[: len(good) // 2])
    return t, f"{op['partitionPath']}/{op['dataFilePath']}"


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOODIED_")}
    env.update(PYTHONPATH=str(PROJECT), XDG_STATE_HOME=str(tmp_path / "state"))
    return env


def _hoodied(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hoodied.service.cli", *args], cwd=PROJECT,
                          env=_env(tmp_path), text=True, capture_output=True, timeout=300)


def test_execute_on_a_corrupt_base_file_prints_one_error_line(tmp_path: Path) -> None:
    root = tmp_path / "t"
    t, name = _corrupt_table(root)
    done = _hoodied(tmp_path, "execute", str(root), *SETTINGS)
    assert done.returncode == 4, done.stderr[-3000:]
    lines = done.stderr.splitlines()
    assert lines[-1] == (f"hoodied: error: {name}: cannot read the base file (Parquet magic bytes not found "
                         "in footer. Either the file is corrupted or this is not a parquet file.) "
                         f"(see: {TROUBLESHOOTING_URL}#hoodieformaterror)"), lines[-1]
    noise = [line for line in lines[:-1] if not _CONSOLE_INFO.match(line)]
    assert noise == [], done.stderr[-3000:]  # was 44 warning and error lines: the task's traceback, the JVM's
    assert len(lines) <= 5, lines  # the session, the inflight file, the Spark job, the error
    assert _state(root, t).value == "inflight"

    debug = _hoodied(tmp_path, "--debug", "execute", str(root), *SETTINGS)
    assert debug.returncode == 4, debug.stderr[-3000:]
    assert "Exception in task" in debug.stderr and "HoodieFormatError" in debug.stderr


def test_the_daemon_logs_one_error_line_for_the_failed_job(tmp_path: Path) -> None:
    root = tmp_path / "t"
    t, name = _corrupt_table(root)
    config = tmp_path / "hoodied.yaml"
    config.write_text(yaml.safe_dump({
        "spark": {"master": "local[2]"}, "clock_skew_ms": 5, "poll_interval_seconds": 0.2,
        "heartbeat": {"interval_ms": 500, "tolerable_misses": 2}, "log": {"format": "json"}, "http": "off",
        "controls": {"local_store": str(tmp_path / "controls.sqlite")},
    }))
    done = _hoodied(tmp_path, "run", "--config", str(config), "--once", "--table", str(root))
    assert done.returncode == 1, done.stderr[-3000:]
    records = [json.loads(line) for line in done.stderr.splitlines()]  # every line one JSON record
    loud = [r for r in records if r["level"] not in ("debug", "info")]
    assert not [r for r in loud if r["logger"] == "hoodied.spark"], loud
    assert not [r for r in records if "exception" in r], records
    ended = [r for r in loud if r["event"] == "job ended"]
    assert len(ended) == 1 and ended[0]["outcome"] == "corrupt" and name in ended[0]["message"], loud
    assert [r["event"] for r in loud if r is not ended[0]] == [
        "table quarantined: left untouched until a retry finds the cause gone or it is released"
    ], loud
    assert _state(root, t).value == "inflight"
