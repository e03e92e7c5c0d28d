"""Metadata-table reads bounded by what a commit touches: records of given keys or key prefixes.

``HFileReader.scan_rows`` against a brute-force scan; ``merge.merge_slice_keys`` against the
whole-slice ``merge_file_slice`` on the record_index and column_stats slices of Hudi's own
metadata tables, and on multi-block HFiles, where it must read fewer data blocks than the file has.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

from hoodied.hoodie.hfile.reader import HFileReader
from hoodied.hoodie.hfile.writer import BaseHFileWriter, encode_base_hfile
from hoodied.hoodie.log import BlockType, delete_block_records, read_log_blocks
from hoodied.hoodie.metadata.encode import COLUMN_STATS, RECORD_INDEX, metadata_schema_json
from hoodied.hoodie.metadata.merge import compacted_cells, merge_file_slice, merge_slice_keys
from hoodied.hoodie.metadata.reader import METADATA_FOLDER, MetadataTable
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage, Storage
from hoodied.hoodie.timeline.active import Timeline
from tests.hoodie.metadata.record_index_mdt import build_record_index_mdt

MDT_FIXTURES = [
    "mor/avro/v8_trips_8i3u1d",
    "cow/v9_timebasedkeygen_nonhivestyle",
    "cow/v9_txns_nonpart_meta",
    "cow/v9_txns_simple_meta",
    "mor/avro/v9_txns_simple_meta",
]
SCHEMA = '{"type":"record","name":"R","fields":[{"name":"key","type":"string"}]}'


class CountingStorage(LocalStorage):
    """A local storage counting ranged reads (one per HFile block) and whole reads, per path."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.ranged: Counter[str] = Counter()
        self.whole: Counter[str] = Counter()

    def read(self, path: str) -> bytes:
        self.whole[path] += 1
        return super().read(path)

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        self.ranged[path] += 1
        return super().read_range(path, offset, length)


def _mdt(root: Path) -> MetadataTable:
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    mdt = MetadataTable.open(storage, config, Timeline.load(storage, config))
    assert mdt is not None
    return mdt


def _deleted_keys(storage: Storage, logs: Iterable[str]) -> set[str]:
    return {rec.record_key for path in logs for block in read_log_blocks(storage, path)
            if block.block_type is BlockType.DELETE
            for rec in delete_block_records(block) if rec.record_key is not None}


def _view(entries: Mapping[str, Any]) -> dict[str, tuple[Any, Any, Any]]:
    return {k: (e.record, e.raw, e.schema_json) for k, e in entries.items()}


# ------------------------------------------------------------------------- HFileReader.scan_rows


def test_scan_rows_equals_brute_force_and_reads_only_the_blocks_needed(tmp_path: Path) -> None:
    cells = [(f"key-{i:05d}", f"value {i}".encode() * 4) for i in range(0, 6000, 2)]
    data = encode_base_hfile(cells, SCHEMA, block_size=1024, create_time_ms=0)
    (tmp_path / "f.hfile").write_bytes(data)
    storage = CountingStorage(str(tmp_path))
    reader = HFileReader.open(storage, "f.hfile")
    opened = storage.ranged["f.hfile"]
    every = list(HFileReader(data, "mem").iter_cells())
    assert reader.data_block_count > 50
    # keys: present, absent between two rows, before the first, after the last, repeated
    keys = [b"key-00000", b"key-00001", b"key-02468", b"key-05998", b"aaa", b"zzz", b"key-02468"]
    got = list(reader.scan_rows(keys))
    assert got == [c for c in every if c[0] in set(keys)]
    assert [r for r, _ in got] == [b"key-00000", b"key-02468", b"key-05998"]
    key_reads = storage.ranged["f.hfile"] - opened
    assert key_reads <= 2 * len(set(keys)) < reader.data_block_count
    # prefixes: one covering another, a prefix spanning several blocks, an absent one
    prefixes = [b"key-012", b"key-0123", b"key-04", b"key-9", b"kez"]
    before = storage.ranged["f.hfile"]
    got = list(reader.scan_rows(prefixes, prefix=True))
    assert got == [c for c in every if c[0].startswith(tuple(prefixes))]
    assert len(got) == 50 + 500
    assert storage.ranged["f.hfile"] - before < reader.data_block_count // 2
    assert list(reader.scan_rows([])) == [] and list(reader.scan_rows([b""], prefix=True)) == every


# ------------------------------------------------------------------ merge_slice_keys: Hudi's MDTs


@pytest.mark.parametrize("fid", MDT_FIXTURES)
def test_record_index_lookup_equals_whole_slice_merge(shared_table, fid: str) -> None:
    mdt = _mdt(shared_table(fid))
    compared = 0
    for fs in mdt.file_slices(RECORD_INDEX):
        full = merge_file_slice(mdt.storage, mdt.timeline, fs.base_file, list(fs.log_files)).entries
        deleted = _deleted_keys(mdt.storage, fs.log_files)
        wanted = {*sorted(full)[::2], *deleted, "no-such-key", "~after-every-key"}
        got = merge_slice_keys(mdt.storage, mdt.timeline, fs.base_file, list(fs.log_files), keys=wanted)
        assert _view(got.entries) == _view({k: e for k, e in full.items() if k in wanted})
        compared += len(got.entries)
    assert compared > 0


@pytest.mark.parametrize("fid", MDT_FIXTURES)
def test_column_stats_prefix_read_equals_whole_slice_merge(shared_table, fid: str) -> None:
    mdt = _mdt(shared_table(fid))
    compared = 0
    for fs in mdt.file_slices(COLUMN_STATS):
        full = merge_file_slice(mdt.storage, mdt.timeline, fs.base_file, list(fs.log_files)).entries
        # column + partition prefixes (two 12-character hashes), as partition stats read them
        heads = sorted({k[:24] for k in full})
        chosen = {*heads[::2], "AAAAAAAAAAAAAAAAAAAAAAAA"}
        got = merge_slice_keys(mdt.storage, mdt.timeline, fs.base_file, list(fs.log_files), prefixes=chosen)
        assert _view(got.entries) == _view({k: e for k, e in full.items() if k[:24] in chosen})
        compared += len(got.entries)
    assert compared > 0


# ------------------------------------------------------------- merge_slice_keys: multi-block files


def test_record_index_lookup_reads_few_base_blocks(tmp_path: Path) -> None:
    gen = build_record_index_mdt(tmp_path / "mdt", 3000, deltas=2, block_size=1024)
    storage = CountingStorage(str(gen.root))
    timeline = Timeline.load(storage, gen.config)
    full = merge_file_slice(storage, timeline, gen.base_file, gen.log_files).entries
    assert storage.whole[gen.base_file] == 1  # the whole-slice merge reads the base file whole
    deleted = _deleted_keys(storage, gen.log_files)
    wanted = {*sorted(full)[::400], *sorted(deleted)[:3], "no-such-key"}
    assert deleted and len(wanted) >= 10
    storage.ranged.clear()
    got = merge_slice_keys(storage, timeline, gen.base_file, gen.log_files, keys=wanted)
    assert _view(got.entries) == _view({k: e for k, e in full.items() if k in wanted})
    assert not set(got.entries) & deleted
    blocks = HFileReader(storage.read(gen.base_file), gen.base_file).data_block_count
    block_reads = storage.ranged[gen.base_file] - 2  # opening: trailer, load-on-open section
    assert blocks > 100 and 0 < block_reads <= 2 * len(wanted) < blocks


def test_column_stats_prefix_read_reads_few_base_blocks(hudi_table) -> None:
    root = hudi_table("mor/avro/v9_txns_simple_meta")
    mdt = _mdt(root)
    fs = max(mdt.file_slices(COLUMN_STATS), key=lambda s: len(s.log_files))
    full_before = merge_file_slice(mdt.storage, mdt.timeline, fs.base_file, list(fs.log_files)).entries
    # the slice's records rewritten as a base file of many small blocks, under the same log files
    base = f"{COLUMN_STATS}/multi-block-base.hfile"
    cells = compacted_cells(full_before, mdt.data_config.version, "multi-block-base.hfile")
    with open(root / METADATA_FOLDER / base, "wb") as f:
        writer = BaseHFileWriter(metadata_schema_json(mdt.data_config.version), block_size=512,
                                 create_time_ms=0, sink=f)
        for key, value in cells:
            writer.append(key, value)
        writer.close()
    storage = CountingStorage(str(root / METADATA_FOLDER))
    full = merge_file_slice(storage, mdt.timeline, base, list(fs.log_files)).entries
    heads = sorted({k[:24] for k in full})
    chosen = {heads[1], heads[len(heads) // 2]}
    storage.ranged.clear()
    got = merge_slice_keys(storage, mdt.timeline, base, list(fs.log_files), prefixes=chosen)
    expected = {k: e for k, e in full.items() if k[:24] in chosen}
    assert expected and _view(got.entries) == _view(expected)
    blocks = HFileReader.open(storage, base).data_block_count
    block_reads = storage.ranged[base] - 2
    assert blocks > 20 and 0 < block_reads < blocks // 2
