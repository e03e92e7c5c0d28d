"""A table in S3 whose listings cross several 1,000-key pages (a real moto server).

S3's ListObjectsV2 answers at most 1,000 keys per request, so a timeline folder or a partition
of more than 1,000 files is listed in pages. The table here (written by the project's own
writer, then uploaded) has a timeline of more than 3,000 files (4 pages), a partition of more
than 1,000 log files (2 pages) and one failed write left pending near the start of the timeline
(requested, never completed: it is what keeps the daemon's offset listing long). Every read path
that lists is run on the S3 copy and on the local original, and must see the same objects; the
requests the daemon's poll sends are pinned, on the process's counter and on moto's own log.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import obstore
import pyarrow as pa
import pytest
from obstore.store import S3Store

from hoodied.hoodie.demo.writer import TableSpec, create_table
from hoodied.hoodie.properties import TableType, load_table_config
from hoodied.hoodie.storage import STORAGE_REQUESTS, LocalStorage, Storage
from hoodied.hoodie.storage_factory import storage_for
from hoodied.hoodie.table import HoodieTable
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.compact import scan_names
from hoodied.planners.clean import CleanPolicy, CleanSettings, plan_clean
from hoodied.service.cli.report import inspect_table
from hoodied.service.config import load_config
from hoodied.service.daemon.loop import Daemon
from hoodied.service.daemon.poll import PollResult, poll_table
from hoodied.service.daemon.registry import build_registry
from tests.helpers.mor_tables import hudi_rs_rows
from tests.helpers.object_servers import (  # noqa: F401  (fixtures)
    S3_KEY_ID,
    S3_SECRET,
    MotoRequestLog,
    MotoServer,
    moto_server,
    s3_env,
)

SCHEMA = pa.schema([("id", pa.string()), ("ts", pa.int64()), ("city", pa.string()), ("v", pa.float64())])
#: delta commits after the insert: 3 timeline files each (more than 3,000: 4 pages), and one log
#: file each in partition ``city=sf`` (more than 1,000 beside its base files: 2 pages)
DELTA_COMMITS = 1_010
#: the failed write is left pending after this many delta commits
FAILED_AFTER = 10
KEYS = 30
PAGE = 1_000
#: the partition of the log files (hive-style, as the writer names it)
SF = "city=sf"


def _pages(n: int) -> int:
    return max(1, -(-n // PAGE))


@dataclass(frozen=True)
class Wide:
    local: Path
    uri: str
    failed: str
    """The requested time of the failed (pending) delta commit."""


def _write(root: Path) -> str:
    spec = TableSpec("wide", SCHEMA, "id", "city", "ts", TableType.MERGE_ON_READ, 9)
    writer = create_table(LocalStorage(str(root)), spec, max_file_rows=10)
    rows = [{"id": f"k{i:03d}", "ts": 1, "city": "sf" if i < 20 else "ny", "v": 1.0} for i in range(KEYS)]
    writer.insert(pa.Table.from_pylist(rows, schema=SCHEMA))
    failed = ""
    for n in range(DELTA_COMMITS):
        if n == FAILED_AFTER:  # a writer that died after creating its requested file
            failed = writer.clock.next()
            (root / ".hoodie" / "timeline" / f"{failed}.deltacommit.requested").write_bytes(b"")
        row = {"id": f"k{n % 20:03d}", "ts": 2 + n, "city": "sf", "v": float(n)}
        writer.upsert(pa.Table.from_pylist([row], schema=SCHEMA))
    return failed


@pytest.fixture(scope="module")
def wide(moto_server: MotoServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Wide]:  # noqa: F811
    """The table, written locally once and uploaded to a fresh bucket (in parallel: 4,000+ PUTs)."""
    local = tmp_path_factory.mktemp("wide") / "t"
    failed = _write(local)
    bucket = moto_server.new_bucket()
    store = S3Store(bucket, endpoint=moto_server.endpoint, region="us-east-1", access_key_id=S3_KEY_ID,
                    secret_access_key=S3_SECRET, client_options={"allow_http": True})
    files = [p for p in sorted(local.rglob("*")) if p.is_file()]

    def put(path: Path) -> None:
        obstore.put(store, f"t/{path.relative_to(local).as_posix()}", path.read_bytes())

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, files))
    yield Wide(local, f"s3://{bucket}/t", failed)


@pytest.fixture
def table(wide: Wide, s3_env: MotoServer) -> Wide:  # noqa: F811
    return wide


def _requests(before: dict[str, int]) -> dict[str, int]:
    after = STORAGE_REQUESTS.snapshot()
    return {op: n - before.get(op, 0) for op, n in after.items() if n != before.get(op, 0)}


def _bucket(uri: str) -> str:
    return uri.removeprefix("s3://").split("/")[0]


def _both(table: Wide) -> tuple[LocalStorage, Storage]:
    return LocalStorage(str(table.local)), storage_for(table.uri)


def _files(storage: Storage, folder: str) -> list[tuple[str, int]]:
    return sorted((i.path, i.size) for i in storage.list(folder) if not i.is_dir)


def test_listings_see_every_object_and_count_each_page(table: Wide, moto_server: MotoServer) -> None:  # noqa: F811
    local, s3 = _both(table)
    timeline = _files(local, ".hoodie/timeline")
    partition = _files(local, SF)
    assert len(timeline) > 3 * PAGE and PAGE < len(partition) < 2 * PAGE
    moto = MotoRequestLog(moto_server, _bucket(table.uri))
    for folder, expected in ((".hoodie/timeline", timeline), (SF, partition)):
        before = STORAGE_REQUESTS.snapshot()
        assert _files(s3, folder) == expected
        # the timeline folder holds history/ too: a delimiter page counts it among its 1,000
        assert _requests(before) == {"list": _pages(len(expected) + (folder != SF))}
        assert moto.kinds() == {"list": _pages(len(expected) + (folder != SF))}
    everything = sorted((i.path, i.size) for i in local.walk(""))
    before = STORAGE_REQUESTS.snapshot()
    assert sorted((i.path, i.size) for i in s3.walk("")) == everything
    assert _requests(before) == {"list": _pages(len(everything))} == moto.kinds()
    names = [i.name for i in local.list_after(".hoodie/timeline", table.failed, ":")]
    assert len(names) > 3 * PAGE
    before = STORAGE_REQUESTS.snapshot()
    assert [i.name for i in s3.list_after(".hoodie/timeline", table.failed, ":")] == names
    assert _requests(before) == {"list": _pages(len(names))} == moto.kinds()
    # a bounded listing counts the pages it fetched: it stops at the bound, the 1,000th name (the
    # last of the first page) or the 1,001st (the first of the second)
    ordered = [path.rsplit("/", 1)[1] for path, _ in timeline]
    for index, pages in ((PAGE - 1, 1), (PAGE, 2)):
        before = STORAGE_REQUESTS.snapshot()
        assert [i.name for i in s3.list_after(".hoodie/timeline", None, ordered[index])] == ordered[:index]
        assert _requests(before) == {"list": pages} == moto.kinds()


def _instants(table: HoodieTable) -> list[tuple[str, str, str, str | None]]:
    instants = table.timeline.instants
    return [(i.requested_time, i.action.value, i.state.value, i.completion_time) for i in instants]


def _slices(table: HoodieTable) -> list[tuple[str, str, tuple[str, ...]]]:
    latest = table.file_system_view().latest_slices()
    return sorted((s.partition, s.file_id, tuple(s.paths())) for s in latest)


def test_timeline_view_clean_plan_and_inspect_are_the_same_as_on_the_local_copy(table: Wide) -> None:
    local, s3 = _both(table)
    here, there = HoodieTable.open(local), HoodieTable.open(s3)
    assert len(here.timeline.instants) == DELTA_COMMITS + 2
    assert _instants(there) == _instants(here)
    slices = _slices(here)
    assert sum(len(paths) for *_, paths in slices) > DELTA_COMMITS
    assert _slices(there) == slices
    # what clean planning and the view are given (a local listing is in no particular order)
    assert {p: sorted(f) for p, f in there.list_files().items()} == {
        p: sorted(f) for p, f in here.list_files().items()}
    # one file slice per file group (no compaction): the plan is empty on both, from the same listing
    settings = CleanSettings(CleanPolicy.KEEP_LATEST_FILE_VERSIONS, file_versions_retained=1)
    plans = [plan_clean(t.storage, t.config, t.timeline, t.list_files(), settings) for t in (here, there)]
    assert (plans[0].reason, plans[0].files) == (plans[1].reason, plans[1].files)
    reports: list[dict[str, Any]] = [inspect_table(t) for t in (here, there)]
    for report in reports:
        report["table"].pop("base_path")
    assert reports[0] == reports[1]
    assert reports[0]["timeline"]["instants"] == DELTA_COMMITS + 2


def test_hudi_rs_reads_the_same_rows(table: Wide, moto_server: MotoServer) -> None:  # noqa: F811
    rows = hudi_rs_rows(table.local)
    assert sum(rows.values()) == KEYS
    assert hudi_rs_rows(table.uri, options=moto_server.hudi_rs_options()) == rows


def _poll(storage: Storage, cached: PollResult | None) -> tuple[PollResult, dict[str, int]]:
    settings = load_config(overrides={"tables": [storage.base_uri], "http": "off"})
    before = STORAGE_REQUESTS.snapshot()
    result = poll_table(storage, cached, settings.tables[0].policy, build_registry(), settings.heartbeat)
    return result, _requests(before)


def test_the_polls_requests_on_a_timeline_of_four_pages(table: Wide, moto_server: MotoServer) -> None:  # noqa: F811
    local, s3 = _both(table)
    names = sorted(i.name for i in local.list(".hoodie/timeline") if not i.is_dir)
    config = load_table_config(local)
    moto = MotoRequestLog(moto_server, _bucket(table.uri))
    first, cost = _poll(s3, None)
    # the config (a lookup and a read), the timeline folder (its names and history/: 4 pages)
    assert cost == {"head": 1, "get": 1, "list": _pages(len(names) + 1)} == moto.kinds()
    assert sorted(first.names) == names
    full = Timeline.load(local, config)
    assert [(i.requested_time, i.state) for i in first.timeline.instants] == [
        (i.requested_time, i.state) for i in full.instants]
    assert first.services == {(table.failed, full.get(table.failed).action): None}  # type: ignore[union-attr]
    # the names-only scan gives the same pending instants from the names S3 listed
    scanned = scan_names(config, first.names)
    assert scanned is not None and [i.requested_time for i in scanned.pending] == [table.failed]
    # a steady poll lists from the oldest pending instant, the failed write near the start: every
    # name after it, in pages, and reads nothing
    after = [n for n in names if n > table.failed]
    steady, cost = _poll(s3, first)
    assert len(after) > 3 * PAGE
    assert cost == {"list": 4} == moto.kinds()
    assert steady.signature == first.signature and steady.names == first.names


def test_the_daemons_cycles_on_it_cost_a_list_per_page(table: Wide) -> None:
    settings = load_config(overrides={"tables": [table.uri], "http": "off", "defaults": {"paused": True}})
    daemon = Daemon(settings, once=True)

    async def main() -> None:
        await daemon.poll_cycle()  # the first cycle: the config and the full listing
        first.update(daemon.last_cycle_requests or {})
        await daemon.poll_cycle()  # a steady one

    first: dict[str, int] = {}
    anyio.run(main)
    # opening the table (one LIST: is anything there), hoodie.properties (a HEAD and a GET), the
    # timeline folder (4 pages); a paused table is not tidied, so no listing of leftovers
    assert first == {"list": 1 + 4, "head": 1, "get": 1}
    assert daemon.last_cycle_requests == {"list": 4}
    assert daemon.status()["last_poll"]["storage_requests"] == {"list": 4}
