"""Twenty tables in S3 (a real moto server), two daemon replicas sharing a real Redis: every instant once.

Four merge-on-read tables written by hoodied (compaction due) and sixteen fixture tables (a clean
due) are uploaded to one bucket; half of the work was requested before the upload (as another
writer would), the other half is planned by the replicas. Both replicas run one pass
(``run --once``) at the same time against the bucket. Every requested or planned instant is
executed exactly once and completes, no service is planned twice, no heartbeat is left behind,
and hudi-rs reads every table from S3 (with the metadata table and with storage listing) as it
read it before.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.object_storage import ObjectStorage
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action, State
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.planners.clean import CleanSettings, schedule_clean
from hoodied.planners.compaction import schedule_compaction
from tests.helpers.daemon_procs import replicas_once
from tests.helpers.fixtures import require_fixture, unzip_table
from tests.helpers.mor_tables import hudi_rs_rows, written_mor_table
from tests.helpers.object_servers import MotoServer, moto_server, s3_env, upload_tree  # noqa: F401  (fixtures)
from tests.helpers.redis_server import RedisServer, redis_server  # noqa: F401  (fixture)

CLEAN_FIXTURES = ["cow/v9_txns_simple_nometa", "mor/avro/v9_txns_simple_nometa", "cow/v9_txns_complex_nometa"]
QUICK = TimeSettings(max_expected_clock_skew_ms=5)
SETTINGS: dict[str, Any] = {
    "defaults": {"services": {"clean": {"commits_retained": 2}, "compaction": {"schedule": False}}},
    "clock_skew_ms": 5,
    "poll_interval_seconds": 0.2,
    "heartbeat": {"interval_ms": 500, "tolerable_misses": 2},
    "retry": {"backoff_seconds": 0.05, "backoff_max_seconds": 0.2},
    "spark": {"master": "local[1]"},
    "log": {"format": "json"},
    "http": "off",
    "concurrency": {"workers": 2},
}



def _rows(uri: str, server: MotoServer, *, listing: str) -> Counter[Any]:
    return hudi_rs_rows(uri, options=server.hudi_rs_options(), metadata=listing == "metadata")


def _timeline(uri: str) -> Timeline:
    storage = ObjectStorage.connect(uri)
    return Timeline.load(storage, load_table_config(storage))


def test_twenty_s3_tables_two_replicas_execute_every_instant_exactly_once(
    tmp_path: Path, s3_env: MotoServer, redis_server: RedisServer  # noqa: F811
) -> None:
    local = tmp_path / "local"
    mor = [local / f"written_mor_{i}" for i in range(4)]
    for root in mor:
        written_mor_table(root)  # six delta commits: compaction is due by the default trigger (5)
    cleans = [unzip_table(require_fixture(CLEAN_FIXTURES[i % 3]), local / f"fixture_{i:02d}")
              for i in range(16)]
    requested: dict[Path, str] = {}
    for root in mor[:2]:  # half of the work is requested by "another writer" before the daemons start
        storage = LocalStorage(str(root))
        inst, _ = schedule_compaction(storage, InProcessLock(storage.base_uri), time_settings=QUICK)
        assert inst is not None
        requested[root] = inst.requested_time
    for root in cleans[:8]:
        storage = LocalStorage(str(root))
        inst, _ = schedule_clean(storage, InProcessLock(storage.base_uri), CleanSettings(commits_retained=2),
                                 time_settings=QUICK)
        assert inst is not None
        requested[root] = inst.requested_time
    bucket = s3_env.new_bucket()
    uris = {root: upload_tree(root, bucket, f"lake/t{n:02d}") for n, root in enumerate([*mor, *cleans])}
    before = {u: _rows(u, s3_env, listing="storage") for u in uris.values()}
    existing = {u: {i.requested_time for i in _timeline(u).instants} for u in uris.values()}

    # the other half is planned by the replicas' policy (compaction planning only where it is on)
    entries: list[Any] = [{"path": uris[t], "policy": {"services": {"compaction": {"schedule": True}}}}
                          for t in mor[2:]]
    entries += [uris[t] for t in [*mor[:2], *cleans]]
    config = tmp_path / "hoodied.yaml"
    config.write_text(yaml.safe_dump({**SETTINGS, "tables": entries, "lock": {"url": redis_server.url}}))
    ended, executed = replicas_once(config, 2, 400)
    assert set(executed.values()) == {1}
    for root, uri in uris.items():
        new = [i for i in _timeline(uri).instants if i.requested_time not in existing[uri]
               or i.requested_time == requested.get(root)]
        comps = [i for i in new if i.action is Action.COMPACTION]
        cleaned = [i for i in new if i.action is Action.CLEAN]
        assert len(comps) == (1 if root in mor else 0), (uri, comps)  # never planned twice
        assert len(cleaned) == (1 if root in cleans else len(cleaned)) and len(cleaned) <= 1, (uri, cleaned)
        for inst in [*comps, *cleaned]:
            assert inst.state is State.COMPLETED, (uri, inst)
            assert executed[(uri, inst.requested_time)] == 1, (uri, inst)
        if root in requested:
            assert requested[root] in {i.requested_time for i in [*comps, *cleaned]}
        assert not ObjectStorage.connect(uri).list(".hoodie/.heartbeat"), uri
        assert _rows(uri, s3_env, listing="storage") == before[uri], f"{uri} reads differently"
        assert _rows(uri, s3_env, listing="metadata") == before[uri], f"{uri} reads differently (MDT)"
    planned = Counter((e["table"], e["action"]) for e in ended if e["outcome"] == "planned")
    assert set(planned.values()) == {1}
    assert {t for t, a in planned if a == "compaction"} == {uris[t] for t in mor[2:]}
