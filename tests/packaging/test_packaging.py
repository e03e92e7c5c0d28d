"""The wheel, built for real: one top-level package, ``hoodied``, that survives a clashing neighbour.

The product's folders (``hoodie/``, ``planners/``, ``executors/``, ``service/``) are mapped into
``hoodied.*`` by setuptools ``package-dir``. A copy of the project's build inputs is built into a
wheel with pip (in a temporary folder, so no build output lands in the checkout), and:

- the wheel holds ``hoodied/`` and its dist-info only: every module of the four folders, the Avro
  schemas, the ``py.typed`` markers; nothing of ``tests/`` or ``bench/``, no bare folder names;
- a hand-written wheel of a foreign distribution, ``executors`` 9.9, whose top-level packages are
  ``executors``, ``planners``, ``service`` and ``hoodie`` (each ``__init__`` raises ImportError),
  is installed beside it in a fresh venv (both install orders). hoodied still imports; after
  ``pip uninstall executors`` it still imports, its ``hoodied`` command runs and every file of
  its RECORD is still there, byte for byte.

The fresh venv gets hoodied's dependencies from this test's venv through a ``.pth`` line (nothing
is downloaded); the project's editable install is not active there (its ``.pth`` lives in a folder
that is only appended to ``sys.path``), and the test checks that every hoodied module comes from
the installed wheel.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path
from typing import Any

import pytest

PROJECT = Path(__file__).resolve().parents[2]
#: The product's folders and the import names the wheel gives them.
FOLDERS = {"hoodie": "hoodied/hoodie", "planners": "hoodied/planners",
           "executors": "hoodied/executors", "service": "hoodied/service"}
#: What the build reads (the Dockerfile copies the same).
BUILD_INPUTS = ["pyproject.toml", "README.md", *FOLDERS]
#: One module of each package, through the sub-packages; the CLI module imports the daemon.
PROBE_MODULES = ["hoodied.hoodie.timeline.active", "hoodied.executors.engine",
                 "hoodied.planners.compaction", "hoodied.service.cli.main"]
FOREIGN_NAME, FOREIGN_VERSION = "executors", "9.9"
FOREIGN_TOP_LEVEL = ["executors", "hoodie", "planners", "service"]
#: Files of the foreign distribution that have the same path as a module of the old layout.
FOREIGN_MODULES = ["executors/engine.py", "planners/compaction.py", "service/config.py", "hoodie/table.py"]


def _run(args: list[str | Path], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=240,
                          cwd=cwd, env=env)
    assert done.returncode == 0, f"{' '.join(map(str, args))}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done


def _source_files(pattern: str) -> dict[str, Path]:
    """Files of the product's folders as the wheel should name them (``hoodied/<folder>/...``)."""
    found = {}
    for folder, target in FOLDERS.items():
        for path in (PROJECT / folder).rglob(pattern):
            if "__pycache__" not in path.parts:
                found[f"{target}/{path.relative_to(PROJECT / folder).as_posix()}"] = path
    return found


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """hoodied's wheel, built by pip from a copy of the build inputs."""
    root = tmp_path_factory.mktemp("wheel")
    src, dist = root / "src", root / "dist"
    for name in BUILD_INPUTS:
        if (PROJECT / name).is_dir():
            shutil.copytree(PROJECT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            src.mkdir(exist_ok=True)
            shutil.copy2(PROJECT / name, src / name)
    pip: list[str | Path] = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                             "--disable-pip-version-check", "-w", dist]
    # this venv's setuptools builds it offline when it can; otherwise pip builds in an isolated env
    done = subprocess.run([str(a) for a in [*pip, "--no-build-isolation", src]],
                          capture_output=True, text=True, timeout=240)
    if done.returncode != 0:
        _run([*pip, src])
    (built,) = dist.glob("hoodied-*.whl")
    return built


@pytest.fixture(scope="module")
def wheel_names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        return zf.namelist()


def _dist_info(names: list[str]) -> str:
    (info,) = {n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")}
    return info


def test_wheel_has_one_top_level_package(wheel: Path, wheel_names: list[str]) -> None:
    info = _dist_info(wheel_names)
    assert re.fullmatch(r"hoodied-[^-/]+\.dist-info", info)
    assert {n.split("/")[0] for n in wheel_names} == {"hoodied", info}
    with zipfile.ZipFile(wheel) as zf:
        if f"{info}/top_level.txt" in wheel_names:
            assert zf.read(f"{info}/top_level.txt").decode().split() == ["hoodied"]
        entry_points = zf.read(f"{info}/entry_points.txt").decode()
    assert re.search(r"^hoodied = hoodied\.service\.cli\.main:main$", entry_points, re.M)
    # hoodied is a namespace: Spark Connect's zip ships hoodied/hoodie and hoodied/executors without one
    assert "hoodied/__init__.py" not in wheel_names
    assert [n for n in wheel_names if {"tests", "bench", "__pycache__"} & set(n.split("/"))] == []
    assert [n for n in wheel_names if n.split("/")[0] in FOLDERS] == []


def test_wheel_holds_every_module_schema_and_marker(wheel_names: list[str]) -> None:
    shipped = set(wheel_names)
    modules = _source_files("*.py")
    assert sorted(set(modules) - shipped) == [], "modules missing: a sub-package absent from `packages`?"
    assert sorted(n for n in shipped if n.endswith(".py")) == sorted(modules)
    schemas = {n for n in _source_files("*.avsc") if n.startswith("hoodied/hoodie/avro/schemas/")}
    assert schemas, "no hoodie/avro/schemas/*.avsc in the checkout"
    assert schemas <= shipped
    assert {n for n in shipped if n.endswith(".avsc")} == schemas
    assert {f"{target}/py.typed" for target in FOLDERS.values()} <= shipped


# ---------------------------------------------------------------- a clashing foreign distribution

def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _foreign_wheel(folder: Path) -> Path:
    """``executors`` 9.9: the four generic top-level names hoodied's folders have, none importable."""
    info = f"{FOREIGN_NAME}-{FOREIGN_VERSION}.dist-info"
    files = {f"{top}/__init__.py": f"raise ImportError('the foreign {FOREIGN_NAME} distribution: {top}')\n"
             for top in FOREIGN_TOP_LEVEL}
    files.update({path: "raise ImportError('the foreign distribution')\n" for path in FOREIGN_MODULES})
    files[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {FOREIGN_NAME}\nVersion: {FOREIGN_VERSION}\n"
    files[f"{info}/WHEEL"] = "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files[f"{info}/top_level.txt"] = "".join(f"{top}\n" for top in FOREIGN_TOP_LEVEL)
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for name, text in files.items():
        writer.writerow([name, _record_hash(text.encode()), len(text.encode())])
    writer.writerow([f"{info}/RECORD", "", ""])
    files[f"{info}/RECORD"] = record.getvalue()
    path = folder / f"{FOREIGN_NAME}-{FOREIGN_VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    return path


def _pip(venv_python: Path, *args: str | Path) -> None:
    _run([sys.executable, "-m", "pip", "--python", venv_python, "--disable-pip-version-check", *args])


#: Run by the fresh venv's interpreter (-I: no PYTHONPATH, no current folder on sys.path).
PROBE = """
import importlib, json, sys
files = {name: importlib.import_module(name).__file__ for name in sys.argv[1:]}
try:
    import executors
    foreign = "importable"
except ModuleNotFoundError:
    foreign = "absent"
except ImportError as exc:
    foreign = str(exc)
print(json.dumps({"files": files, "path": sys.path, "foreign": foreign}))
"""


def _probe(venv_python: Path, cwd: Path) -> dict[str, Any]:
    done = _run([venv_python, "-I", "-c", PROBE, *PROBE_MODULES], cwd=cwd)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _assert_from_wheel(probe: dict[str, Any], site: Path) -> None:
    files: dict[str, str] = probe["files"]
    assert sorted(files) == sorted(PROBE_MODULES)
    for name, file in files.items():
        assert Path(file).is_relative_to(site), f"{name} imported from {file}, not from the installed wheel"
    assert [p for p in probe["path"] if "__editable__" in p or Path(p) == PROJECT] == []


def _assert_record_intact(wheel: Path, site: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        info = _dist_info(zf.namelist())
        rows = list(csv.reader(io.StringIO(zf.read(f"{info}/RECORD").decode())))
    checked = 0
    for name, digest, _size in rows:
        if not digest:  # RECORD itself: pip rewrites it at install
            continue
        installed = site / name
        assert installed.is_file(), f"{name} of hoodied's RECORD is gone"
        assert _record_hash(installed.read_bytes()) == digest, f"{name} of hoodied's RECORD changed"
        checked += 1
    assert checked > 100


@pytest.mark.parametrize("order", ["hoodied-first", "foreign-first"])
def test_foreign_distribution_with_clashing_names(order: str, wheel: Path, tmp_path: Path) -> None:
    foreign = _foreign_wheel(tmp_path)
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv])
    python = venv / "bin" / "python"
    site = Path(_run([python, "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
                .stdout.strip())
    for whl in ([wheel, foreign] if order == "hoodied-first" else [foreign, wheel]):
        _pip(python, "install", "-q", "--no-deps", "--no-index", whl)
    for top in FOREIGN_TOP_LEVEL:
        assert (site / top / "__init__.py").is_file(), f"the foreign {top}/ is not installed"
    # hoodied's dependencies: this venv's site-packages, appended to sys.path (its .pth files not run)
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "zz-test-dependencies.pth").write_text("".join(f"{p}\n" for p in sorted(ours)))

    probe = _probe(python, tmp_path)
    _assert_from_wheel(probe, site)
    assert probe["foreign"] == f"the foreign {FOREIGN_NAME} distribution: executors"
    _assert_record_intact(wheel, site)

    _pip(python, "uninstall", "-y", "-q", FOREIGN_NAME)
    assert not (site / "executors").exists()
    probe = _probe(python, tmp_path)
    _assert_from_wheel(probe, site)
    assert probe["foreign"] == "absent"
    _assert_record_intact(wheel, site)
    shown = _run([venv / "bin" / "hoodied", "--help"], cwd=tmp_path)
    assert "run" in shown.stdout
