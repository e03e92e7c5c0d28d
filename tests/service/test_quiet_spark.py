"""``hoodied execute`` on a real local Spark, standard error on a terminal: only hoodied's lines.

The demo table's compaction is planned, then executed by a real process whose standard error is a
pseudo-terminal (standard output a pipe). What the terminal shows is replayed from the raw bytes:
the "starting Spark" spinner turned while the JVM started, the job's bar was drawn, and every line
left on the screen is one of hoodied's console log lines: no py4j "Closing down clientserver
connection", no Spark INFO/WARN line, no "Setting default log level" note, no raw JVM line (the JVM's
own notices are hoodied's DEBUG records of logger ``hoodied.spark``, shown with ``--debug``), and no log
line written into the spinner or the bar.
"""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
import threading
from pathlib import Path

from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.active import Timeline
from tests.service.test_cli_scripts import screen

CLI = [sys.executable, "-m", "hoodied.service.cli"]
#: hoodied's console log line: ISO time, [level], event, [logger] (``service.logs``)
HOODIED_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z \[(debug|info|warning|error|critical) *\] ")
#: printed by the JVM itself (Spark adds --add-modules=jdk.incubator.vector), before log4j starts
JVM_MODULE_NOTICE = "Using incubator modules: jdk.incubator.vector"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOODIED_")}
    env["COLUMNS"] = "200"
    return env


def _on_a_terminal(args: list[str]) -> tuple[int, str, str]:
    """Run ``hoodied ARGS`` with standard error on a pseudo-terminal; (exit code, stdout, terminal bytes)."""
    controller, terminal = pty.openpty()
    proc = subprocess.Popen([*CLI, *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=terminal,
                            env=_env(), text=True)
    os.close(terminal)
    chunks: list[bytes] = []

    def drain() -> None:  # read as it comes: a full terminal buffer would block the process
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # EIO: the process closed its end
                return
            if not chunk:
                return
            chunks.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    out, _ = proc.communicate(timeout=280)
    reader.join(timeout=30)
    os.close(controller)
    return proc.returncode, out, b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")


def test_execute_on_a_terminal_shows_a_spinner_a_bar_and_no_spark_or_py4j_lines(tmp_path: Path) -> None:
    demo = subprocess.run([*CLI, "demo", str(tmp_path / "d"), "--json"], env=_env(), capture_output=True,
                          text=True, timeout=120, check=True)
    table = json.loads(demo.stdout)["path"]
    planned = subprocess.run([*CLI, "schedule", "compaction", table, "--json", "--clock-skew-ms", "5"],
                             env=_env(), capture_output=True, text=True, timeout=120, check=True)
    t = json.loads(planned.stdout)["instant"]

    code, out, raw = _on_a_terminal(["execute", table, "--spark", "local[1]", "--clock-skew-ms", "5"])
    assert code == 0, raw[-3000:]
    assert out.startswith(f"{t} compaction: ") and "completed at" in out, out
    storage = LocalStorage(table)
    done = Timeline.load(storage, load_table_config(storage)).get(t)
    assert done is not None and done.is_completed

    assert "starting Spark (local[1])" in raw, raw[-3000:]  # the spinner turned while the JVM started
    assert f"compaction {t}  [" in raw  # the job's bar
    assert "Closing down clientserver" not in raw and "Setting default log level" not in raw
    assert "Using Spark's default log4j profile" not in raw
    shown = [line for line in screen(raw) if line.strip()]
    strays = [line for line in shown if not HOODIED_LINE.match(line)]
    assert not strays, strays  # no raw Spark line, and no log line that landed inside the spinner or the bar
    assert any("local Spark session local[1]" in line for line in shown)
    assert JVM_MODULE_NOTICE not in raw  # a DEBUG record
