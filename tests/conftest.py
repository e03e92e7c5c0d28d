"""Shared test fixtures: real Hudi tables unzipped into temporary folders (``tests.helpers.fixtures``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.fixtures import require_fixture, unzip_table


@pytest.fixture(autouse=True)
def _own_state_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test (and every ``hoodied`` process it starts) keeps the daemon's local table controls
    (``controls.local_store``'s default, under ``$XDG_STATE_HOME``) in a folder of its own, outside
    its ``tmp_path`` (tests check what a run leaves there) and never in the home folder of the
    machine running the tests."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state-home")))


@pytest.fixture(scope="session")
def _fixture_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fixture-cache")


@pytest.fixture
def hudi_table(tmp_path: Path):
    """Factory: ``hudi_table("mor/avro/v8_trips_8i3u1d")`` -> a fresh, writable copy of the table."""

    def make(fid: str) -> Path:
        return unzip_table(require_fixture(fid), tmp_path / fid.replace("/", "_"))

    return make


@pytest.fixture(scope="session")
def shared_table(_fixture_cache: Path):
    """Factory for a read-only copy shared by the whole session (do not modify it)."""

    def make(fid: str) -> Path:
        dest = _fixture_cache / fid.replace("/", "_")
        if not dest.exists():
            unzip_table(require_fixture(fid), dest)
        return next(p for p in dest.iterdir())

    return make
