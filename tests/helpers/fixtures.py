"""The real Hudi tables the tests run on: where they are, and fresh copies of them.

The tables come from ``HOODIED_FIXTURES`` (default ``../shared/fixtures/hudi-tables`` next to
the project). Where they are absent the tests that need them are skipped with a clear reason.
"""

from __future__ import annotations

import os
import shutil
import zipfile
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[2]
FIXTURES = Path(os.environ.get("HOODIED_FIXTURES", PROJECT.parent / "shared" / "fixtures" / "hudi-tables"))


def fixture_zips() -> list[Path]:
    if not FIXTURES.is_dir():
        return []
    return sorted(FIXTURES.rglob("*.zip"))


def fixture_id(zip_path: Path) -> str:
    """``cow/v6_empty`` style ids: the table name with the folder that says COW/MOR/format."""
    rel = zip_path.relative_to(FIXTURES).with_suffix("")
    parts = [p for p in rel.parts if p not in ("hudi-rs", "sample_table", "quickstart_trips_table")]
    return "/".join(parts)


ALL_FIXTURES = {fixture_id(z): z for z in fixture_zips()}


def unzip_table(zip_path: Path, dest: Path) -> Path:
    """Unzip one fixture (skipping ``__MACOSX/``) and return the table folder."""
    with zipfile.ZipFile(zip_path) as zf:
        members = [m for m in zf.namelist() if not m.startswith("__MACOSX/")]
        zf.extractall(dest, members)
        roots = {m.split("/", 1)[0] for m in members}
    assert len(roots) == 1, f"{zip_path}: expected one table folder, found {roots}"
    return dest / roots.pop()


def require_fixture(fid: str) -> Path:
    if fid not in ALL_FIXTURES:
        pytest.skip(f"Hudi fixture {fid!r} not found under {FIXTURES} (set HOODIED_FIXTURES)")
    return ALL_FIXTURES[fid]


def copy_table(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest)
    return dest
