"""pyspark is imported only by a process that runs a Spark job.

Each case runs the ``hoodied`` command in a fresh interpreter (the one running the tests, from
a folder outside the checkout) and reports, as its last line, whether ``pyspark`` ended up in
``sys.modules``: ``hoodied --help``, ``hoodied inspect`` of a real table and one poll-only pass
of the daemon (``hoodied run --once``) over a table with nothing due. The import-linter contract
"no pyspark in the CLI, the daemon and the use cases" pins the static side.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.active import Timeline
from tests.helpers.fixtures import require_fixture, unzip_table

#: Runs ``hoodied ARGS...`` in-process, then prints whether pyspark was imported.
PROBE = """\
import sys
from hoodied.service.cli.main import main
code = 0
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print(f"exit={code} pyspark={'pyspark' in sys.modules}")
"""


def _hoodied(tmp_path: Path, *args: str) -> tuple[str, str]:
    """(the probe's last stdout line, stderr) of ``hoodied ARGS`` in a fresh interpreter."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOODIED_")}  # no user settings
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=120,
    )
    lines = done.stdout.strip().splitlines()
    assert lines, done.stderr
    return lines[-1], done.stderr


def test_help_does_not_import_pyspark(tmp_path: Path) -> None:
    last, err = _hoodied(tmp_path, "--help")
    assert last == "exit=0 pyspark=False", err


def test_inspect_does_not_import_pyspark(tmp_path: Path) -> None:
    root = unzip_table(require_fixture("mor/avro/v9_txns_simple_nometa"), tmp_path / "t")
    last, err = _hoodied(tmp_path, "inspect", str(root))
    assert last == "exit=0 pyspark=False", err


def test_a_poll_only_daemon_pass_does_not_import_pyspark(tmp_path: Path) -> None:
    """One ``--once`` pass polls the table and evaluates every planner's trigger; nothing is due."""
    root = unzip_table(require_fixture("mor/avro/v9_txns_simple_nometa"), tmp_path / "t")
    storage = LocalStorage(str(root))
    assert Timeline.load(storage, load_table_config(storage)).pending() == []  # nothing to execute either
    config = tmp_path / "hoodied.yaml"
    config.write_text(yaml.safe_dump({
        "tables": [str(root)], "http": "off", "log": {"format": "console"},
        "defaults": {"services": {
            "clean": {"trigger_commits": 1000},
            "compaction": {"delta_commits": 1000},
            "clustering": {"schedule": True, "trigger_commits": 1000},
        }},
    }))
    last, err = _hoodied(tmp_path, "run", "--config", str(config), "--once")
    assert last == "exit=0 pyspark=False", err
    assert "job started" not in err  # a pass that ran nothing
