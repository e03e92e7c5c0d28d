"""Heartbeats (``.hoodie/.heartbeat/<instant>``) and direct write markers (``.hoodie/.temp/<instant>/``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hoodied.hoodie.errors import HoodieFormatError
from hoodied.hoodie.heartbeat import (
    Heartbeat,
    delete_heartbeat,
    heartbeat_path,
    is_heartbeat_expired,
    last_heartbeat_ms,
)
from hoodied.hoodie.markers import IOType, Marker, WriteMarkers
from hoodied.hoodie.storage import LocalStorage

PROJECT = Path(__file__).resolve().parents[2]
T = "20260101000000123"


def _storage(tmp_path: Path) -> LocalStorage:
    (tmp_path / ".hoodie").mkdir()
    return LocalStorage(str(tmp_path))


# ---------------------------------------------------------------- heartbeats


def test_heartbeat_is_refreshed_while_working_and_deleted_after(tmp_path: Path) -> None:
    storage = _storage(tmp_path)
    assert heartbeat_path(T) == f".hoodie/.heartbeat/{T}"
    assert last_heartbeat_ms(storage, T) == 0
    assert is_heartbeat_expired(storage, T)  # no heartbeat at all counts as expired
    with Heartbeat(storage, T, interval_ms=100) as hb:
        first = last_heartbeat_ms(storage, T)
        assert first > 0 and hb.running
        time.sleep(0.45)
        assert hb.beats >= 3
        assert last_heartbeat_ms(storage, T) > first
        assert not is_heartbeat_expired(storage, T, interval_ms=100, tolerable_misses=2)
    assert not (tmp_path / ".hoodie" / ".heartbeat" / T).exists()
    assert not hb.running


def test_heartbeat_expiry_rule(tmp_path: Path) -> None:
    storage = _storage(tmp_path)
    hb = Heartbeat(storage, T, interval_ms=60_000)
    hb.beat()
    last = last_heartbeat_ms(storage, T)
    # expired only when now - last > interval * misses (Hudi's rule), strictly
    assert not is_heartbeat_expired(storage, T, interval_ms=1_000, tolerable_misses=2, now_ms=last + 2_000)
    assert is_heartbeat_expired(storage, T, interval_ms=1_000, tolerable_misses=2, now_ms=last + 2_001)
    assert delete_heartbeat(storage, T)
    assert not delete_heartbeat(storage, T)


def test_heartbeat_of_a_killed_process_expires(tmp_path: Path) -> None:
    storage = _storage(tmp_path)
    code = (
        "import sys, time\n"
        "from hoodied.hoodie.storage import LocalStorage\n"
        "from hoodied.hoodie.heartbeat import Heartbeat\n"
        f"Heartbeat(LocalStorage({str(tmp_path)!r}), {T!r}, interval_ms=100).start()\n"
        "print('up', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=str(PROJECT)),
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
        time.sleep(0.3)
        assert not is_heartbeat_expired(storage, T, interval_ms=100, tolerable_misses=2)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=10)
    time.sleep(0.35)
    assert (tmp_path / ".hoodie" / ".heartbeat" / T).exists()  # left behind by the crash
    assert is_heartbeat_expired(storage, T, interval_ms=100, tolerable_misses=2)


def test_heartbeat_start_fails_loudly_and_interval_must_be_positive(tmp_path: Path) -> None:
    (tmp_path / ".hoodie").write_text("not a folder")
    with pytest.raises(Exception, match="heartbeat|Not a directory|not a directory"):
        Heartbeat(LocalStorage(str(tmp_path)), T).start()
    with pytest.raises(ValueError):
        Heartbeat(LocalStorage(str(tmp_path)), T, interval_ms=0)


# ---------------------------------------------------------------- markers


BASE = "3e93c8a9-0d3e-4b36-a6d4-4a3e6e6c1e0c-0_0-13-23_20260101000000123.parquet"
LOG = ".3e93c8a9-0d3e-4b36-a6d4-4a3e6e6c1e0c-0_20260101000000123.log.1_0-13-23"


@pytest.mark.parametrize(
    "relative,marker",
    [
        (f"city=sf/{BASE}.marker.CREATE", Marker("city=sf", BASE, IOType.CREATE)),
        (f"2023/04/04/13/{BASE}.marker.MERGE", Marker("2023/04/04/13", BASE, IOType.MERGE)),
        (f"{LOG}.marker.APPEND", Marker("", LOG, IOType.APPEND)),
    ],
)
def test_marker_grammar_round_trip(relative: str, marker: Marker) -> None:
    assert Marker.parse(relative) == marker
    assert marker.format() == relative


@pytest.mark.parametrize("bad", [BASE, f"{BASE}.marker.DELETE", "x/.marker.CREATE", ".marker.CREATE"])
def test_marker_parse_rejects_other_names(bad: str) -> None:
    assert Marker.parse(bad) is None


def test_direct_markers_on_disk(tmp_path: Path) -> None:
    storage = _storage(tmp_path)
    markers = WriteMarkers(storage, T)
    assert not markers.exists()
    markers.create("city=sf", BASE, IOType.CREATE)
    markers.create("city=sf", BASE, IOType.CREATE)  # re-run: fine, one marker
    markers.create("", LOG, IOType.APPEND)
    folder = tmp_path / ".hoodie" / ".temp" / T
    assert (folder / "city=sf" / f"{BASE}.marker.CREATE").read_bytes() == b""
    assert (folder / f"{LOG}.marker.APPEND").exists()
    assert markers.exists()
    assert markers.markers() == [Marker("", LOG, IOType.APPEND), Marker("city=sf", BASE, IOType.CREATE)]
    assert markers.data_files() == [LOG, f"city=sf/{BASE}"]
    assert markers.data_files((IOType.CREATE, IOType.MERGE)) == [f"city=sf/{BASE}"]
    assert markers.delete_all() == 2
    assert markers.markers() == [] and not markers.exists()


def test_timeline_server_markers_are_read(tmp_path: Path) -> None:
    storage = _storage(tmp_path)
    folder = tmp_path / ".hoodie" / ".temp" / T
    folder.mkdir(parents=True)
    (folder / "MARKERS.type").write_text("TIMELINE_SERVER_BASED")
    (folder / "MARKERS0").write_text(f"city=sf/{BASE}.marker.CREATE\ncity=la/{BASE}.marker.MERGE\n")
    (folder / "MARKERS1").write_text(f"{LOG}.marker.APPEND\n")
    markers = WriteMarkers(storage, T)
    assert markers.data_files() == [LOG, f"city=la/{BASE}", f"city=sf/{BASE}"]
    (folder / "MARKERS2").write_text("garbage\n")
    with pytest.raises(HoodieFormatError, match="MARKERS2: line 'garbage' is not a marker"):
        markers.markers()
