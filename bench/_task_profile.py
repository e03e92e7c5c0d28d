"""Where a compaction task's CPU goes: parquet write, bloom filter, log decoding, base read.

``profile_task`` runs every operation of a prepared compaction job in this process (after one
warm-up run) under ``cProfile`` with ``time.process_time`` as its clock (so CPU in pyarrow's native threads
counts, and waiting does not), then splits the task's CPU into phases by the cumulative time of
the functions that own them (``_measure.phase_shares``):

* ``parquet_write``: pyarrow encoding and compressing row groups and the footer
  (``BaseFileWriter._flush``, ``ParquetWriter.close``);
* ``bloom_filter``: hashing the record keys into the filter and serialising it;
* ``log_decoding``: decoding Avro data blocks, parquet data blocks and delete blocks;
* ``log_scan``: reading the log files and their block headers;
* ``base_read``: reading the old base file.

The codec alone cannot be told apart inside pyarrow's write, so ``codec_share`` measures it
beside: the task's output rows are written again (in memory) with the table's codec and
uncompressed, best of 3 each, and the difference is divided by the task's CPU.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import time
from typing import Any

import pyarrow.parquet as pq
from _measure import phase_shares, self_cpu

from hoodied.executors.compaction import CompactionJob, compact_operation
from hoodied.hoodie import reader
from hoodied.hoodie.basefile import BaseFileSettings, BaseFileWriter
from hoodied.hoodie.bloom import BloomFilter
from hoodied.hoodie.log import blocks
from hoodied.hoodie.properties import TableConfig
from hoodied.hoodie.storage import Storage

PHASES = {
    "parquet_write": [BaseFileWriter._flush, pq.ParquetWriter.close],
    "bloom_filter": [BloomFilter.add_keys, BloomFilter.serialize],
    "log_decoding": [blocks.avro_block_to_arrow, blocks.parquet_block_table, blocks.delete_block_records],
    "log_scan": [reader.scan_log_blocks],
    "base_read": [reader._base_batches],
}


def _write_cpu(table: Any, codec: str, level: int | None) -> float:
    best = float("inf")
    for _ in range(3):
        sink = io.BytesIO()
        cpu0 = self_cpu()
        pq.write_table(table, sink, compression=codec, compression_level=level)
        best = min(best, self_cpu() - cpu0)
    return best


def profile_task(storage: Storage, config: TableConfig, job: CompactionJob) -> dict[str, Any]:
    """CPU seconds of the job's operations, their phase shares and the codec's share.

    The operations run once unprofiled first (under another write token, so to other files):
    the first run in a process pays for imports and first-use set-up that a Spark Python
    worker, reused from task to task, pays once.
    """
    for i in range(len(job.slices)):
        compact_operation(job, i, "0-0-1")
    profiler = cProfile.Profile(time.process_time)
    cpu0 = time.process_time()
    profiler.enable()
    rows = [compact_operation(job, i, "0-0-0") for i in range(len(job.slices))]
    profiler.disable()
    total = time.process_time() - cpu0
    shares = phase_shares(pstats.Stats(profiler), PHASES, total)
    codec, level = BaseFileSettings.for_table(config).parquet_codec
    written = 0.0
    for row in rows:
        with storage.open(row.column("path")[0].as_py()) as f:
            table = pq.read_table(f)
        written += _write_cpu(table, codec, level) - _write_cpu(table, "none", None)
    return {
        "cpu_seconds": round(total, 3),
        "shares": shares,
        "codec_share": round(max(0.0, written) / total, 3) if total > 0 else 0.0,
    }
