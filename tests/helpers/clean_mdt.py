"""A clean whose MDT delta commit compacts the metadata table: the table set up, the result read.

No pyspark here: a test's child process imports this to run the daemon's clean without Spark.
"""

from __future__ import annotations

import threading
from pathlib import Path

from hoodied.hoodie.hfile.reader import HFileReader
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.metadata.compaction import MAX_DELTA_COMMITS_KEY, deltas_since_last_compaction
from hoodied.hoodie.metadata.reader import METADATA_FOLDER
from hoodied.hoodie.metadata.rollback import latest_mdt_compaction
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.service.config import DaemonConfig, HeartbeatConfig, Policy
from hoodied.service.daemon.registry import JobContext, build_registry
from hoodied.service.spark_jobs import SparkEngine

#: Below the MDT delta commits Hudi's v9 fixtures have since their last MDT compaction (6 and 7).
MAX_DELTAS = 5
FAST = TimeSettings(max_expected_clock_skew_ms=5)


def compaction_due(root: Path) -> None:
    """Make the MDT compaction due at the next MDT delta commit (the data table's property)."""
    props = root / ".hoodie" / "hoodie.properties"
    props.write_text(props.read_text() + f"{MAX_DELTA_COMMITS_KEY}={MAX_DELTAS}\n")
    mdt = LocalStorage(str(root / METADATA_FOLDER))
    deltas, _ = deltas_since_last_compaction(Timeline.load(mdt, load_table_config(mdt, metadata_table=True)))
    assert deltas >= MAX_DELTAS


def last_mdt_compaction(root: Path) -> tuple[str, dict[tuple[str, str], list[tuple[bytes, bytes]]]]:
    """The latest completed MDT compaction: its time and its base files' cells by (partition, file id)."""
    mdt = LocalStorage(str(root / METADATA_FOLDER))
    inst = latest_mdt_compaction(Timeline.load(mdt, load_table_config(mdt, metadata_table=True)))
    assert inst is not None and inst.is_completed
    t = inst.requested_time
    cells = {}
    for p in sorted((root / METADATA_FOLDER).glob(f"*/*_{t}.hfile")):
        # the file's own name (``_hoodie_file_name``) carries the compaction's instant time
        cells[(p.parent.name, p.name.split("_", 1)[0])] = [
            (k, v.replace(t.encode(), b"<T>")) for k, v in HFileReader(p.read_bytes(), str(p)).iter_cells()
        ]
    return t, cells


def run_daemon_clean(root: Path, engine: SparkEngine) -> str:
    """The daemon's clean executor (``build_registry()``'s) on the pending clean of ``root``, with a
    ``JobContext`` as ``service.daemon.jobs`` builds it; its summary."""
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    (inst,) = Timeline.load(storage, config).pending((Action.CLEAN,))
    settings = DaemonConfig(heartbeat=HeartbeatConfig(interval_ms=100), clock_skew_ms=5)
    ctx = JobContext(storage, config, inst, InProcessLock(storage.base_uri), Policy(), settings, FAST,
                     threading.Event(), engine)
    spec = build_registry().executor_for(Action.CLEAN)
    assert spec is not None
    summary = spec.run(ctx)
    assert isinstance(summary, str), summary  # executed, not found completed already
    return summary
