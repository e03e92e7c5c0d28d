"""The Apache Hudi lane: every test here runs real Apache Hudi (``tests.helpers.hudi_peer``) beside
hoodied and carries the ``hudi`` marker (``pytest -m hudi`` runs the lane alone, ``-m 'not hudi'``
everything else)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.hudi_peer import RELEASES, HudiPeer, peer


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    lane = Path(__file__).parent
    for item in items:
        if lane in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.hudi)


@pytest.fixture(scope="session", params=RELEASES)
def hudi_peer(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HudiPeer]:
    """One Hudi release's Spark session for the whole lane (pytest groups the lane's tests by release,
    so each release's JVM starts once)."""
    yield from peer(request.param, tmp_path_factory.mktemp(f"peer-{request.param}"))
