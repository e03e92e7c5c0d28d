"""Shared test fixtures: real Hudi tables unzipped into temporary folders (``tests.helpers.fixtures``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.fixtures import require_fixture, unzip_table


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
