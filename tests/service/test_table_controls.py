"""The per-table controls stores (``service.table_controls``): the same behaviour in a real Redis and in
a real SQLite file, and the ``hoodied table`` commands on them."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from hoodied.service.cli.main import EXIT_NOT_FOUND, EXIT_STORAGE, TROUBLESHOOTING_URL, cli
from hoodied.service.config import ConfigError, load_config
from hoodied.service.table_controls import (
    ControlStore,
    JobRecord,
    Pause,
    Quarantine,
    RedisControlStore,
    SqliteControlStore,
    UnknownTableError,
    open_store,
    resolve_table,
    with_retry,
)
from tests.helpers.redis_server import RedisServer, redis_server  # noqa: F401  (fixture)


@pytest.fixture(params=["redis", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ControlStore]:
    if request.param == "redis":
        server: RedisServer = request.getfixturevalue("redis_server")
        settings = load_config(overrides={"lock": server.url, "controls": {"history_size": 3}})
    else:
        settings = load_config(overrides={"controls": {"history_size": 3,
                                                       "local_store": str(tmp_path / "s" / "c.sqlite")}})
    opened = open_store(settings)
    assert isinstance(opened, RedisControlStore if request.param == "redis" else SqliteControlStore)
    try:
        yield opened
    finally:
        opened.close()


def _job(n: int, replica: str = "r1") -> JobRecord:
    instant = f"2024010100000000{n}"
    return JobRecord("execute", "clean", instant, "success", 0.5, f"job {n}", replica, 1000.0 + n)


def test_pause_resume_quarantine_and_release(store: ControlStore) -> None:
    assert not store.read_all().pauses and not store.read_all().quarantines
    store.pause("/t/a", Pause("ann@host", 10.0, "backfill running"))
    first = Quarantine("cannot read the table: bad properties", 20.0, "r1", None, next_retry_at=30.0)
    assert store.quarantine("/t/b", first) == first
    # the first quarantine wins: another replica's later one does not replace it
    assert store.quarantine("/t/b", Quarantine("something else", 21.0, "r2")) == first
    controls = store.read_all()
    assert controls.of("/t/a").pause == Pause("ann@host", 10.0, "backfill running")
    assert controls.of("/t/a").quarantine is None and controls.of("/t/b").quarantine == first
    assert store.resume("/t/a") and not store.resume("/t/a")
    assert store.release("/t/b") == first and store.release("/t/b") is None
    assert store.read_all().of("/t/b") == store.read_all().of("/t/a")  # neither paused nor quarantined


def test_history_is_newest_first_and_capped(store: ControlStore) -> None:
    for n in range(5):
        store.record("/t/a", [_job(n)])
    store.record("/t/b", [_job(9, "r2")])
    got = store.history("/t/a", 10)
    assert [r.message for r in got] == ["job 4", "job 3", "job 2"]  # history_size 3
    assert store.history("/t/a", 2) == got[:2]
    got_all = store.histories(["/t/a", "/t/b", "/t/c"], 1)
    assert got_all == {"/t/a": got[:1], "/t/b": [_job(9, "r2")], "/t/c": []}


def test_a_due_retry_is_claimed_by_exactly_one_replica(store: ControlStore) -> None:
    q = Quarantine("plan failed", 100.0, "r1", "20240101000000000", next_retry_at=200.0)
    store.quarantine("/t/a", q)
    assert store.claim_retry("/t/a", "r1", 150.0, 60) is None  # not due yet
    assert store.claim_retry("/t/x", "r1", 250.0, 60) is None  # not quarantined
    won: list[str] = []
    barrier = threading.Barrier(8)

    def contend(replica: str) -> None:
        barrier.wait()
        if store.claim_retry("/t/a", replica, 250.0, 60) == q:
            won.append(replica)

    threads = [threading.Thread(target=contend, args=(f"r{i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1
    # the winner stores its retry: the next one is not due before its time, whoever asks
    retried = with_retry(q, error="instant still pending", next_at=400.0)
    store.retried("/t/a", won[0], retried)
    assert store.read_all().of("/t/a").quarantine == retried
    assert store.claim_retry("/t/a", "r7", 300.0, 60) is None
    assert store.claim_retry("/t/a", "r7", 400.0, 60) == retried
    assert store.release("/t/a") == retried
    store.quarantine("/t/a", q)  # a release drops the claim with the quarantine
    assert store.claim_retry("/t/a", "r3", 250.0, 60) == q


def test_a_stale_retry_never_touches_a_newer_quarantine(store: ControlStore) -> None:
    old = Quarantine("plan failed", 100.0, "r1", "20240101000000000", next_retry_at=200.0)
    store.quarantine("/t/a", old)
    assert store.claim_retry("/t/a", "r2", 250.0, 60) == old
    # while r2 retries, a person releases the table and r3 quarantines it for a new cause
    assert store.release("/t/a") == old
    new = Quarantine("corrupt plan", 260.0, "r3", "20240102000000000", next_retry_at=560.0)
    store.quarantine("/t/a", new)
    # r2's retry ends late: neither its count nor its release reaches the new quarantine
    store.retried("/t/a", "r2", with_retry(old, error="still pending", next_at=900.0))
    assert store.read_all().of("/t/a").quarantine == new
    assert store.release("/t/a", expected=old) is None
    assert store.read_all().of("/t/a").quarantine == new
    # the claimed quarantine itself, at any retry count, is the one a retry releases
    again = with_retry(new, error="x", next_at=600.0)
    store.retried("/t/a", "r3", again)
    assert store.read_all().of("/t/a").quarantine == again
    assert store.release("/t/a", expected=new) == again
    assert store.read_all().of("/t/a").quarantine is None


def test_tables_resolve_to_the_names_the_daemon_uses(tmp_path: Path) -> None:
    listed, lake = tmp_path / "t1", tmp_path / "lake"
    settings = load_config(overrides={"tables": [str(listed)], "discover": [str(lake)]})
    assert resolve_table(settings, str(listed) + "/") == str(listed)
    assert resolve_table(settings, str(lake / "a" / "t2")) == str(lake / "a" / "t2")
    with pytest.raises(UnknownTableError, match="not a table of the settings"):
        resolve_table(settings, str(tmp_path / "elsewhere"))
    assert resolve_table(settings, "/seen/by/the/daemon", known=["/seen/by/the/daemon"])


def test_settings_of_the_controls_are_checked_and_the_token_stays_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ConfigError, match="http_writes needs http_token"):
        load_config(overrides={"controls": {"http_writes": True}})
    with pytest.raises(ConfigError, match="expected a local file path"):
        load_config(overrides={"controls": {"local_store": "s3://bucket/c.sqlite"}})
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert load_config().controls.local_store_path == str(tmp_path / "xdg" / "hoodied" / "controls.sqlite")
    monkeypatch.setenv("HOODIED_CONTROLS__HTTP_WRITES", "true")
    monkeypatch.setenv("HOODIED_CONTROLS__HTTP_TOKEN", "s3cr3t-token")
    file = tmp_path / "hoodied.yaml"
    file.write_text(yaml.safe_dump({"tables": [str(tmp_path / "t")]}))
    settings = load_config(file)
    assert settings.controls.http_token is not None
    assert settings.controls.http_token.get_secret_value() == "s3cr3t-token"
    shown = CliRunner().invoke(cli, ["config", "check", str(file), "--print"])
    assert shown.exit_code == 0 and "s3cr3t-token" not in shown.output and "http_token" in shown.output


# ---------------------------------------------------------------------------- the commands


def _config(tmp_path: Path, **values: object) -> Path:
    path = tmp_path / "hoodied.yaml"
    path.write_text(yaml.safe_dump({"tables": [str(tmp_path / "t1")],
                                    "controls": {"local_store": str(tmp_path / "c.sqlite")}, **values}))
    return path


def _table(config: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["table", *args, "--config", str(config)])
    return result.exit_code, result.output


def test_table_commands_pause_resume_release_and_show_history(tmp_path: Path) -> None:
    config = _config(tmp_path)
    t1 = str(tmp_path / "t1")
    code, out = _table(config, "pause", t1, "--reason", "backfill")
    assert code == 0 and out.strip() == f"paused {t1}: backfill"
    code, out = _table(config, "show", "--json")
    shown = json.loads(out)
    assert code == 0 and list(shown) == [t1] and shown[t1]["pause"]["reason"] == "backfill"
    assert "@" in shown[t1]["pause"]["by"] and shown[t1]["quarantine"] is None
    store = SqliteControlStore(str(tmp_path / "c.sqlite"), 50)
    store.quarantine(t1, Quarantine("cannot read the table: x", time.time(), "replica-1"))
    for n in range(3):
        store.record(t1, [_job(n, "replica-1")])
    code, out = _table(config, "show")
    assert code == 0 and "paused by" in out and "quarantined by replica-1" in out, out
    code, out = _table(config, "history", t1, "--limit", "2", "--json")
    assert code == 0 and [r["message"] for r in json.loads(out)] == ["job 2", "job 1"]
    code, out = _table(config, "history", t1)
    assert code == 0 and out.count("replica-1: job") == 3, out
    code, out = _table(config, "release", t1)
    assert code == 0 and out.strip() == f"released {t1} (quarantined: cannot read the table: x)"
    assert _table(config, "release", t1)[1].strip() == f"{t1} was not quarantined"
    assert _table(config, "resume", t1)[1].strip() == f"resumed {t1}"
    assert _table(config, "show")[1].startswith("no table is paused or quarantined")


def test_table_commands_fail_in_one_line_with_their_exit_codes(
    tmp_path: Path, redis_server: RedisServer  # noqa: F811
) -> None:
    config = _config(tmp_path)
    code, out = _table(config, "pause", str(tmp_path / "other"))
    assert code == EXIT_NOT_FOUND and out.strip().endswith(
        "not a table of the settings (tables, or under a discover root) "
        f"(see: {TROUBLESHOOTING_URL}#unknowntableerror)"), out
    down = _config(tmp_path, lock=redis_server.url)
    redis_server.stop()
    code, out = _table(down, "pause", str(tmp_path / "t1"))
    assert code == EXIT_STORAGE and out.startswith("hoodied: error: table controls at redis://"), out
    assert len(out.strip().splitlines()) == 1
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"controls": {"history_size": 0}}))
    code, out = _table(bad, "show")
    assert code == 2 and "controls.history_size" in out
