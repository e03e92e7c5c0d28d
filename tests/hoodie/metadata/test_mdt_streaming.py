"""The streaming MDT compaction (``compact_file_slice`` into a ``BaseHFileWriter``) against the
whole-slice path it replaced (``merge_file_slice`` + ``compacted_cells`` + ``encode_base_hfile``),
kept here as the oracle: byte-identical base files on every slice of every fixture with a metadata
table and on generated record indexes of many HFile blocks; and a Python-memory peak bounded by
the block size, which the whole-slice path exceeds."""

from __future__ import annotations

import gc
import io
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from hoodied.hoodie.errors import HoodieFormatError
from hoodied.hoodie.fsview import FileSystemView, LogFile, list_storage
from hoodied.hoodie.hfile.reader import HFileReader
from hoodied.hoodie.hfile.writer import BLOOM_BATCH, BaseHFileWriter, HFileWriter, encode_base_hfile
from hoodied.hoodie.log import BlockType, HeaderKey, encode_block, write_log_file
from hoodied.hoodie.metadata import merge
from hoodied.hoodie.metadata.compaction import execute_mdt_compaction, schedule_mdt_compaction
from hoodied.hoodie.metadata.encode import metadata_schema_json
from hoodied.hoodie.metadata.merge import compact_file_slice, compacted_cells, merge_file_slice
from hoodied.hoodie.metadata.reader import METADATA_FOLDER
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage, Storage
from hoodied.hoodie.timeline.active import Timeline
from tests.hoodie.metadata.record_index_mdt import build_record_index_mdt

#: Every fixture with a metadata table (INDEX.md), table versions 8 and 9, COW and MOR.
MDT_FIXTURES = [
    "mor/avro/v8_trips_8i3u1d",
    "mor/avro/v9_txns_simple_meta",
    "mor/avro/v9_txns_simple_overwrite",
    "cow/v9_txns_simple_meta",
    "cow/v9_txns_nonpart_meta",
    "cow/v9_txns_simple_overwrite",
    "cow/v9_timebasedkeygen_nonhivestyle",
    "cow/v9_lance_nonpartitioned",
]


def _oracle(
    storage: Storage,
    timeline: Timeline,
    base: str | None,
    logs: list[str],
    version: int,
    name: str,
    block_size: int,
) -> tuple[bytes, int, int]:
    """The whole-slice path: (file bytes, records, keys the logs touched)."""
    merged = merge_file_slice(storage, timeline, base, logs)
    cells = compacted_cells(merged.entries, version, name)
    data = encode_base_hfile(cells, metadata_schema_json(version), block_size=block_size, create_time_ms=0)
    return data, len(cells), merged.log_keys


def _streamed(
    storage: Storage,
    timeline: Timeline,
    base: str | None,
    logs: list[str],
    version: int,
    name: str,
    block_size: int,
) -> tuple[bytes, int, int]:
    sink = io.BytesIO()
    schema = metadata_schema_json(version)
    writer = BaseHFileWriter(schema, block_size=block_size, create_time_ms=0, sink=sink)
    done = compact_file_slice(storage, timeline, base, logs, version, name, writer)
    size = writer.close()
    assert size == len(sink.getvalue())
    return sink.getvalue(), done.records, done.log_keys


def _slices(mdt: Storage) -> tuple[Timeline, int, list[tuple[str | None, list[str], str]]]:
    config = load_table_config(mdt, metadata_table=True)
    timeline = Timeline.load(mdt, config)
    view = FileSystemView.build(list_storage(mdt, config), timeline, config)
    out = []
    for group in view.file_groups():
        for s in group.slices:
            logs = sorted((lf for lf in s.log_files if lf.completion_time is not None), key=LogFile.sort_key)
            base = s.base_file.path if s.base_file is not None else None
            out.append((base, [lf.path for lf in logs], f"{s.file_id}_0-1-0_99999999999999999.hfile"))
    return timeline, config.version, out


@pytest.mark.parametrize("fid", MDT_FIXTURES)
def test_byte_identical_to_the_whole_slice_path_on_fixtures(fid: str, shared_table) -> None:
    root = shared_table(fid)
    mdt = LocalStorage(str(root / METADATA_FOLDER))
    timeline, version, slices = _slices(mdt)
    assert slices
    with_logs = 0
    for base, logs, name in slices:
        with_logs += bool(logs)
        # Hudi's block size, and a tiny one so that the output has many blocks
        for block_size in (1 << 20, 256):
            ours = _streamed(mdt, timeline, base, logs, version, name, block_size)
            assert ours == _oracle(mdt, timeline, base, logs, version, name, block_size), (base, logs)
    assert with_logs  # the MDT is merge-on-read for every table type


@pytest.mark.parametrize("version", [9, 8])
@pytest.mark.parametrize("ranged_logs", [False, True])
def test_byte_identical_on_a_record_index_of_many_blocks(
    version: int, ranged_logs: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if ranged_logs:  # every log block read by ranges, one HFile block at a time
        monkeypatch.setattr(merge, "_WHOLE_LOG_BLOCK", 0)
    m = build_record_index_mdt(tmp_path, 6000, table_version=version, deltas=3, block_size=4096)
    base = HFileReader.open(m.storage, m.base_file)
    assert base.data_block_count > 100
    timeline = Timeline.load(m.storage, m.config)
    name = "record-index-0000-0_0-1-0_99999999999999999.hfile"
    for block_size in (1 << 20, 4096):
        ours = _streamed(m.storage, timeline, m.base_file, m.log_files, version, name, block_size)
        assert ours == _oracle(m.storage, timeline, m.base_file, m.log_files, version, name, block_size)
    assert 0 < ours[1] < 6000 and ours[2] > 0  # deletes applied, updates seen


def test_log_slice_without_base_file(tmp_path: Path) -> None:
    m = build_record_index_mdt(tmp_path, 3000, deltas=2, block_size=4096)
    timeline = Timeline.load(m.storage, m.config)
    name = "record-index-0000-0_0-1-0_99999999999999999.hfile"
    ours = _streamed(m.storage, timeline, None, m.log_files, 9, name, 4096)
    assert ours == _oracle(m.storage, timeline, None, m.log_files, 9, name, 4096)
    assert ours[1] > 0


def test_execute_compacts_a_record_index(tmp_path: Path) -> None:
    m = build_record_index_mdt(tmp_path, 5000, deltas=2, block_size=4096)
    timeline = Timeline.load(m.storage, m.config)
    with m.timeline.lock:
        inst = schedule_mdt_compaction(m.timeline, m.timeline.new_instant_time())
        assert inst is not None
        c = inst.requested_time
        merged, records, _ = _oracle(m.storage, timeline, m.base_file, m.log_files, 9, "x", 1 << 20)
        first = execute_mdt_compaction(m.timeline, c, 9)
    written = first.base_files[0]
    data = (tmp_path / written).read_bytes()
    assert first.records == records == HFileReader(data, written).entry_count
    reader = HFileReader(data, written)
    assert [r for r, _ in reader.iter_cells()] == [r for r, _ in HFileReader(merged, "x").iter_cells()]
    assert not list((tmp_path / "record_index").glob(".*.tmp"))  # no temp file left behind


def test_rerun_keeps_a_base_file_already_written(tmp_path: Path) -> None:
    m = build_record_index_mdt(tmp_path, 2000, deltas=1, block_size=4096)
    with m.timeline.lock:
        inst = schedule_mdt_compaction(m.timeline, m.timeline.new_instant_time())
        assert inst is not None
        c = inst.requested_time
        plan = Timeline.load(m.storage, m.config).read_plan(inst)
        assert plan is not None
        op = plan["operations"][0]
        kept = f"record_index/{op['fileId']}_9-9-9_{c}.hfile"
        (tmp_path / kept).write_bytes(encode_base_hfile([("k", b"v")], metadata_schema_json(9)))
        result = execute_mdt_compaction(m.timeline, c, 9)
    assert result.base_files == [kept] and result.records == 1


def test_out_of_order_hfile_rows_are_refused(tmp_path: Path) -> None:
    """A log block whose HFile is not sorted would make the merge miss records: an error."""
    m = build_record_index_mdt(tmp_path, 50, deltas=1, block_size=4096)
    schema = metadata_schema_json(9)
    cells = list(HFileReader.open(m.storage, m.base_file).iter_cells())
    w = HFileWriter(create_time_ms=0)
    w.set_file_info("schema", schema.encode())
    w.append(cells[1][0], cells[1][1])
    w._last_row = None  # bypass the writer's own order check to get an unsorted file
    w.append(cells[0][0], cells[0][1])
    bad = w.finish()
    instant = Timeline.load(m.storage, m.config).instants[-1].requested_time
    header = {HeaderKey.INSTANT_TIME: instant, HeaderKey.SCHEMA: schema}
    block = encode_block(BlockType.HFILE_DATA, header, bad)
    log = "record_index/.record-index-0000-0_" + instant + ".log.2_0-0-0"
    write_log_file(m.storage, log, [block])
    timeline = Timeline.load(m.storage, m.config)
    writer = BaseHFileWriter(schema, sink=io.BytesIO())
    with pytest.raises(HoodieFormatError, match="out of order"):
        compact_file_slice(m.storage, timeline, m.base_file, [log], 9, "x.hfile", writer)


# --- memory ----------------------------------------------------------------------------------------


def _peak(fn: Callable[[], object]) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


BLOCK = 8192
#: Copies of a block alive at once, per input: the stored (compressed) block, its decompressed
#: payload, the cells sliced from it, plus the output block's cells and its compressed form.
COPIES_PER_BLOCK = 6


def test_streaming_peak_is_bounded_by_the_block_size(tmp_path: Path) -> None:
    m = build_record_index_mdt(tmp_path, 40_000, deltas=2, block_size=BLOCK)
    timeline = Timeline.load(m.storage, m.config)
    schema = metadata_schema_json(9)
    base = HFileReader.open(m.storage, m.base_file)
    blocks = base.data_block_count
    assert blocks > 400 and base.file_size > 40 * BLOCK

    def streamed() -> BaseHFileWriter:
        with open(tmp_path / "out.hfile", "wb") as f:
            writer = BaseHFileWriter(schema, block_size=BLOCK, create_time_ms=0, sink=f)
            compact_file_slice(m.storage, timeline, m.base_file, m.log_files, 9, "out.hfile", writer)
            writer.close()
        return writer

    warm = streamed()  # schema parsing and module caches out of the measure
    inputs = 1 + 2 * len(m.log_files)  # the base file, a data and a delete block per log file
    # log files up to the log reader's window (1 MiB) are read whole: one log block each here
    logs = sum(m.storage.size(p) for p in m.log_files)
    assert all(m.storage.size(p) <= merge._WHOLE_LOG_BLOCK for p in m.log_files)
    bloom = warm.bloom
    rows = sum(row.nbytes for row in bloom.rows)
    serialized = len(bloom.serialize())  # bytes, base64 text and its ASCII bytes at the end
    hashing = 8 * BLOOM_BATCH * bloom.nb_hash * 8  # int64 position arrays of one batch, a few copies
    # the block indexes (one entry per block) of the inputs, at most a few hundred bytes each
    index = 256 * (blocks + 1) * inputs
    bound = COPIES_PER_BLOCK * BLOCK * (inputs + 1) + logs + rows + 3 * serialized + hashing + index
    streamed_peak = _peak(streamed)
    assert streamed_peak < bound, (streamed_peak, bound)

    def whole() -> None:
        merged = merge_file_slice(m.storage, timeline, m.base_file, m.log_files)
        cells = compacted_cells(merged.entries, 9, "out.hfile")
        encode_base_hfile(cells, schema, block_size=BLOCK, create_time_ms=0)

    # the path it replaced does not fit: the bound is one the test can fail
    assert _peak(whole) > 3 * bound
