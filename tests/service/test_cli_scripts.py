"""The command line for scripts and people: ``--json`` documents, exit codes, human ages and sizes.

Every command that prints a result is run with ``--json`` on a real table and its standard output is
parsed as one JSON document; "nothing due" exits 7 with ``--detailed-exit-code`` (0 without);
``hoodied run --once`` exits 8 when a table cannot be read or a discover root is missing, and lists
them; the status text writes ages as a person reads them and each reason once. The terminal's live
line (a progress bar, a spinner) is checked on a stream replayed as a terminal shows it: a log line
never lands inside the bar.
"""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from hoodied.hoodie.human import format_age, format_size
from hoodied.service.cli.daemon import render_status
from hoodied.service.cli.exits import EXIT_NOTHING_DUE, EXIT_OK, EXIT_UNSERVED, EXIT_USAGE
from hoodied.service.cli.main import cli
from hoodied.service.cli.terminal import progress_bar, spinner
from hoodied.service.logs import configure_logging, live_line
from tests.helpers.fixtures import require_fixture, unzip_table

CLEAN_DUE = "cow/v9_txns_simple_nometa"
SKEW = ["--clock-skew-ms", "5"]


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def run_json(*args: str, code: int = EXIT_OK) -> dict:
    got, out, err = run(*args, "--json")
    assert got == code, err
    doc = json.loads(out)  # one document, nothing else on standard output
    assert isinstance(doc, dict)
    return doc


# -- formatters ---------------------------------------------------------------------------


@pytest.mark.parametrize(("num_bytes", "text"), [
    (0, "0 B"), (512, "512 B"), (1023, "1023 B"), (1024, "1.0 KB"), (42_803, "41.8 KB"),
    (1_048_575, "1.0 MB"), (3 * 2**30, "3.0 GB"), (5 * 2**50, "5.0 PB"),
])
def test_format_size(num_bytes: int, text: str) -> None:
    assert format_size(num_bytes) == text


@pytest.mark.parametrize(("seconds", "text"), [
    (0, "0 s"), (-3, "0 s"), (0.01, "0 s"), (0.42, "0.4 s"), (45, "45 s"), (59.6, "1 min"),
    (200, "3 min 20 s"), (3600, "1 h"), (18_720, "5 h 12 min"), (90_061, "1 d 1 h"), (2 * 86_400 + 5, "2 d"),
    (29_344_387, "339 d"),
])
def test_format_age(seconds: float, text: str) -> None:
    assert format_age(seconds) == text


def test_formatters_refuse_what_is_not_a_size_or_a_duration() -> None:
    with pytest.raises(ValueError):
        format_size(-1)
    with pytest.raises(ValueError):
        format_age(float("nan"))


def test_status_text_has_human_ages_and_each_reason_once() -> None:
    now = 1_800_000_000.0
    failure = "HoodieFormatError: plan 20250101000000000.clean.requested is not Avro"
    reason = f"clean 20250101000000000: 3 attempts failed; last: {failure}"
    doc = {
        "replica": "host:1", "lock": "local", "workers": {"busy": 0, "limit": 4}, "draining": False,
        "stop_reason": None, "last_poll": {"ended_at": now - 3}, "tables_watched": 2, "tables_quarantined": 1,
        "tables": [
            {"path": "/lake/a", "name": "a", "type": "COPY_ON_WRITE", "version": 9, "paused": False,
             "quarantined": reason, "lock": "local",
             "quarantine": {"retries": 2, "next_retry_at": now + 1200},
             "running": None, "pending": [
                 {"instant": "20250101000000000", "action": "clean", "state": "requested",
                  "age_seconds": 29_344_387.0, "status": "quarantined", "note": None}],
             "planning": {},
             "last_outcomes": [{"at": now - 60 * i, "action": "clean", "instant": "20250101000000000",
                                "outcome": "failed", "message": failure} for i in range(3)]},
            {"path": "/lake/b", "name": "b", "type": "MERGE_ON_READ", "version": 9, "paused": True,
             "pause": {"by": "alice", "at": now - 7200, "reason": "backfill"},
             "lock": "ZookeeperBasedLockProvider zk:2181/hudi/b", "quarantined": None,
             "running": {"kind": "execute", "action": "compaction", "instant": "20250102000000000",
                         "seconds": 200.0},
             "pending": [], "planning": {"clean": "nothing to clean: 2 commits retained"},
             "last_outcomes": [{"at": now - 5, "action": "clean", "instant": None, "outcome": "nothing_due",
                                "message": "nothing to clean: 2 commits retained"}],
             "history": [
                 {"kind": "execute", "action": "clean", "instant": None, "outcome": "nothing_due",
                  "seconds": 0.2, "message": "", "replica": "host:1", "finished_at": now - 5},
                 {"kind": "execute", "action": "compaction", "instant": "20250101000000001",
                  "outcome": "success", "seconds": 75.0, "message": "", "replica": "host:2",
                  "finished_at": now - 600}]},
        ],
        "recent_errors": [
            {"at": now - 1, "table": "/lake/a", "error": f"quarantined: {reason}"},
            *({"at": now - 10 * i, "table": "/lake/b", "error": "poll failed: timeout"} for i in range(4)),
        ],
    }
    text = render_status(doc, now=now)
    assert text.count(failure) == 1, text  # the quarantine line says it; outcomes and errors do not repeat it
    assert "pending 20250101000000000 clean requested (339 d old)" in text
    assert "running: execute compaction 20250102000000000 for 3 min 20 s" in text
    assert "last poll 3.0 s ago" in text
    assert text.count("poll failed: timeout") == 1 and "poll failed: timeout (4 times)" in text
    assert " s old" not in text.replace("(339 d old)", "")
    assert text.count("nothing to clean: 2 commits retained") == 1, text  # the plan note says it
    # who paused a table and why, its own lock when not the daemon's, a quarantine's retries, and the
    # newest job another replica ran
    assert "/lake/b  (b, MERGE_ON_READ, v9)  PAUSED by alice 2 h ago: backfill" in text
    assert "  lock: ZookeeperBasedLockProvider zk:2181/hudi/b" in text and text.count("lock: ") == 1
    assert f"QUARANTINED: {reason}\n  next retry in 20 min (2 retries found the cause still there)" in text
    assert "10 min ago: compaction 20250101000000001: success on host:2 (1 min 15 s)" in text


# -- --json and exit codes ----------------------------------------------------------------


def test_help_lists_the_new_exit_codes_and_the_true_log_format_default() -> None:
    code, out, _ = run("--help")
    assert code == 0
    assert "7  nothing due" in out and "8  run --once: some tables could not be served" in out
    assert "Default: console, except `run`" in " ".join(out.split())
    readme = (Path(__file__).parents[2] / "docs" / "reference" / "exit-codes.md").read_text()
    assert "| 7 | nothing due" in readme and "| 8 | `run --once`" in readme


def test_schedule_and_execute_json_then_nothing_due(tmp_path: Path) -> None:
    table = str(unzip_table(require_fixture(CLEAN_DUE), tmp_path / "t"))
    planned = run_json("schedule", "clean", table, "--retained", "2", *SKEW)
    assert planned["planned"] and planned["due"] and not planned["dry_run"]
    assert planned["service"] == "clean" and planned["table"] == table
    t = planned["instant"]
    assert isinstance(t, str) and len(t) == 17 and planned["summary"].startswith("KEEP_LATEST_COMMITS")

    # the pending clean blocks a second plan: nothing due, 7 only when asked for
    again = run_json("schedule", "clean", table, "--retained", "2", *SKEW, "--detailed-exit-code",
                     code=EXIT_NOTHING_DUE)
    assert not again["planned"] and not again["due"] and again["instant"] is None
    assert run("schedule", "clean", table, "--retained", "2", *SKEW)[0] == EXIT_OK

    done = run_json("execute", table, *SKEW)
    assert done["executed"] == 1 and done["failed_writes_rolled_back"] == []
    assert [(i["instant"], i["action"], i["status"]) for i in done["instants"]] == [(t, "clean", "executed")]
    idle = run_json("execute", table, *SKEW, "--detailed-exit-code", code=EXIT_NOTHING_DUE)
    assert idle == {"table": done["table"], "executed": 0, "failed_writes_rolled_back": [], "instants": []}
    code, out, _ = run("execute", table, *SKEW)
    assert code == EXIT_OK and out.strip() == "nothing pending"


def test_rollback_archive_read_and_demo_json(tmp_path: Path) -> None:
    demo = run_json("demo", str(tmp_path / "d"))
    table = demo["path"]
    planned = run_json("schedule", "compaction", table, *SKEW)
    t = planned["instant"]
    assert planned["planned"] and "log files" in planned["summary"]
    # a requested compaction has no attempt to undo: nothing due
    undone = run_json("rollback", table, "--instant", t, *SKEW, "--detailed-exit-code", code=EXIT_NOTHING_DUE)
    assert undone == {"table": table, "instant": t, "kind": "table_service", "rolled_back": False,
                      "summary": f"{t}: only requested, nothing to roll back"}

    archived = run_json("archive", table, "--dry-run", "--detailed-exit-code", code=EXIT_NOTHING_DUE)
    assert archived["dry_run"] and archived["archived"] == [] and archived["table"] == table
    assert archived["stops_at"]["reason"] == "not-enough-commits"
    assert set(archived) >= {"summary", "boundaries", "history_file", "metadata_table", "recovered"}

    out = tmp_path / "rows.parquet"
    read = run_json("read", table, "--output", str(out))
    assert read["rows"] == demo["rows"] and read["output"] == str(out) and out.exists()


def test_config_check_json(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump({"tables": [str(tmp_path / "t")], "http": "off"}))
    doc = run_json("config", "check", str(good))
    assert doc["valid"] and doc["problems"] == [] and doc["summary"]["tables"] == 1
    assert doc["summary"]["http"] is None
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"concurrency": {"workers": 0}}))
    code, out, err = run("config", "check", str(bad), "--json")
    assert code == EXIT_USAGE and "hoodied: invalid settings:" in err
    doc = json.loads(out)
    assert not doc["valid"] and doc["problems"] and "workers" in doc["problems"][0]


def _run_once(tmp_path: Path, settings: dict, *args: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "hoodied.yaml"
    config.write_text(yaml.safe_dump({
        "clock_skew_ms": 5, "http": "off", "defaults": {"paused": True}, **settings,
    }))
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOODIED_")}
    env["HOME"] = str(tmp_path / "home")  # the daemon's local state stays in the test's folder
    command = [sys.executable, "-m", "hoodied.service.cli", "run", "--once", "--config", str(config), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


def test_run_once_exits_8_for_an_unreadable_table_and_a_missing_discover_root(tmp_path: Path) -> None:
    good = unzip_table(require_fixture(CLEAN_DUE), tmp_path / "lake" / "good")
    corrupt = unzip_table(require_fixture(CLEAN_DUE), tmp_path / "lake" / "corrupt")
    (corrupt / ".hoodie" / "hoodie.properties").write_text("not = a hudi table\x00\x01")
    missing = tmp_path / "no-such-lake"
    settings = {"tables": [str(good), str(corrupt)], "discover": [str(missing)]}

    done = _run_once(tmp_path, settings, "--json")
    assert done.returncode == EXIT_UNSERVED, done.stderr[-3000:]
    doc = json.loads(done.stdout)
    assert doc["pass"]["exit_code"] == EXIT_UNSERVED
    unserved = {(u["kind"], u["path"]): u["reason"] for u in doc["pass"]["unserved"]}
    assert set(unserved) == {("table", str(corrupt)), ("discover_root", str(missing))}, unserved
    assert unserved[("table", str(corrupt))].startswith("cannot read the table")
    assert unserved[("discover_root", str(missing))] == "missing"
    assert {t["path"] for t in doc["tables"]} == {str(good), str(corrupt)}
    # `run` logs JSON by default, as `hoodied --help` says
    assert all(json.loads(line) for line in done.stderr.splitlines() if line.strip())

    text = _run_once(tmp_path, settings, "--http", "off")
    assert text.returncode == EXIT_UNSERVED
    assert f"not served: table {corrupt}: cannot read the table" in text.stdout
    assert f"not served: discover root {missing}: missing" in text.stdout
    quarantined = next(line for line in text.stdout.splitlines() if "QUARANTINED" in line)
    reason = quarantined.split("QUARANTINED: ")[1]
    assert text.stdout.count(reason) == 2, text.stdout  # its QUARANTINED line, its "not served" line

    fine = _run_once(tmp_path, {"tables": [str(good)]}, "--json")
    assert fine.returncode == EXIT_OK, fine.stderr[-3000:]
    assert json.loads(fine.stdout)["pass"] == {"exit_code": EXIT_OK, "unserved": []}


def test_run_json_needs_once() -> None:
    code, _, err = run("run", "--table", "/nowhere", "--json")
    assert code == EXIT_USAGE and "--json needs --once" in err


# -- the terminal -------------------------------------------------------------------------


def screen(raw: str) -> list[str]:
    """The lines a terminal shows for ``raw``: ``\\r`` returns to the line's start, ``ESC[K`` erases
    to its end, ``\\n`` starts a new line."""
    lines, line, col = [], "", 0
    i = 0
    while i < len(raw):
        if raw.startswith("\x1b[K", i):
            line, i = line[:col], i + 3
            continue
        ch = raw[i]
        if ch == "\r":
            col = 0
        elif ch == "\n":
            lines.append(line)
            line, col = "", 0
        else:
            line = line[:col] + ch + line[col + 1:]
            col += 1
        i += 1
    return [*lines, line]


def test_log_lines_are_written_above_the_bar_never_into_it(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    configure_logging("console", "INFO")
    log = logging.getLogger("hoodied.test")
    with progress_bar("compaction 20250101000000000", True) as progress:
        assert progress is not None
        progress(1, 4)
        log.warning("first log line")
        progress(3, 4)
        log.warning("second log line")
        logging.getLogger("py4j.clientserver").info("Closing down clientserver connection")
    shown = screen(stream.getvalue())
    logged = [line for line in shown if "log line" in line]
    assert len(logged) == 2 and not any("[#" in line or "compaction 2025" in line for line in logged), shown
    assert shown[-1] == ""  # the bar is cleared when the job ends
    assert "Closing down clientserver" not in stream.getvalue()  # py4j's notes are held at WARNING


def test_spinner_turns_then_clears_and_draws_nothing_when_disabled(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    configure_logging("console", "INFO")  # the live line is drawn where log records go
    with spinner("starting Spark (local[1])", False):
        pass
    assert stream.getvalue() == ""
    with spinner("starting Spark (local[1])", True):
        with live_line():  # a bar inside takes the line until it ends
            pass
    raw = stream.getvalue()
    assert "starting Spark (local[1])" in raw and screen(raw) == [""]


CHILD = r"""
import subprocess, sys, threading
from hoodied.service.logs import child_stderr_logged, configure_logging
configure_logging("json", "INFO")
lines = ["26/01/01 00:00:00 ERROR Executor: Exception in task 0.0 in stage 0.0 (TID 0)",
         "org.apache.spark.api.python.PythonException: Traceback (most recent call last):",
         '  File "compaction.py", line 1, in compact', "hoodied.hoodie.errors.HoodieFormatError: x.parquet",
         "\tat org.apache.spark.Task.run",
         "26/01/01 00:00:00 WARN TaskSetManager: Lost task 1.0 in stage 0.0",
         "26/01/01 00:00:00 ERROR TaskSetManager: Task 0 in stage 0.0 failed 1 times; aborting job",
         "26/01/01 00:00:00 ERROR SparkContext: Error initializing SparkContext.",
         "\tat org.apache.spark.SparkContext.<init>",
         "26/01/01 00:00:01 INFO SparkContext: Running Spark", "WARNING: Using incubator modules: x",
         "Traceback (most recent call last):"]
with child_stderr_logged("hoodied.spark"):
    child = subprocess.Popen([sys.executable, "-c", "import sys, time; sys.stderr.write(sys.argv[1]); "
                              "sys.stderr.flush(); time.sleep(0.5); sys.stderr.write('late line\\n')",
                              "\n".join(lines) + "\n"])
    print("our own line", file=sys.stderr)
child.wait()
for reader in [t for t in threading.enumerate() if t.name == "hoodied.spark-stderr"]:
    reader.join(30)  # it ends when the child, the pipe's last writer, has exited
"""


def test_a_child_s_standard_error_becomes_log_records() -> None:
    """A child started in ``child_stderr_logged`` (a Spark JVM's place) writes log records, even after
    the block; this process's own standard error is untouched."""
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert "our own line" in lines
    records = [json.loads(line) for line in lines if line != "our own line"]
    got = [(r["level"], r["event"]) for r in records if r["logger"] == "hoodied.spark"]
    assert got == [
        ("error", "SparkContext: Error initializing SparkContext."),
        ("error", "\tat org.apache.spark.SparkContext.<init>"),
        ("info", "SparkContext: Running Spark"), ("warning", "Traceback (most recent call last):"),
        ("warning", "late line"),  # written after the block: still read, the child holds the pipe
    ], records  # DEBUG records, below INFO: the JVM's own notice, Spark's reports of a failed task and
    # every line under them (the job's error says it in one line)
