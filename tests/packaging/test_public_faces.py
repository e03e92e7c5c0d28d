"""The public faces of the packages: each package's ``__all__`` is pinned, every exported name
exists, and no module reaches into another package's private modules or names.

A change to a face is a deliberate change to this test.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOTS = ("hoodied.hoodie", "hoodied.planners", "hoodied.executors", "hoodied.service")
#: Packages whose every module declares ``__all__`` (``service`` modules are checked where they do).
ALL_REQUIRED = ("hoodied.hoodie", "hoodied.planners", "hoodied.executors")

FACES: dict[str, list[str]] = {
    "hoodied.hoodie": [
        "Action",
        "ClockSkewError",
        "FileAlreadyExistsError",
        "HeartbeatAliveError",
        "HoodieFormatError",
        "HoodieServiceError",
        "HoodieTable",
        "Instant",
        "InstantNotReadyError",
        "InstantStateError",
        "LocalStorage",
        "LockError",
        "LockLostError",
        "LockServiceDownError",
        "LockUnavailableError",
        "State",
        "Storage",
        "StorageError",
        "TableConfig",
        "TableNotFoundError",
        "Timeline",
        "UnsupportedTableError",
        "load_table_config",
        "storage_for",
    ],
    "hoodied.hoodie.timeline": [
        "Action",
        "Instant",
        "State",
        "TimeSettings",
        "Timeline",
        "TimelineWriter",
        "TrueTime",
        "WRITE_ACTIONS",
        "datetime_to_instant_time",
        "instant_time_to_datetime",
        "is_instant_time",
        "require_instant_time",
    ],
    "hoodied.hoodie.log": [
        "AVRO_DATA_BLOCK_VERSION",
        "BlockType",
        "CommandType",
        "DELETE_BLOCK_VERSION",
        "DeleteRecord",
        "HeaderKey",
        "LOG_FORMAT_VERSION",
        "LogBlock",
        "MAGIC",
        "avro_block_records",
        "avro_block_schema",
        "avro_block_to_arrow",
        "avro_schema_to_arrow",
        "decode_record_positions",
        "delete_block_records",
        "encode_avro_data_block",
        "encode_block",
        "encode_command_block",
        "encode_delete_block",
        "encode_parquet_data_block",
        "encode_record_positions",
        "hfile_block_content",
        "is_rollback_command",
        "parquet_block_table",
        "read_log_blocks",
        "write_log_file",
    ],
    "hoodied.hoodie.hfile": ["HFileReader", "HFileWriter"],
    "hoodied.hoodie.avro": [
        "AvroDecodeError",
        "avro_schema_to_arrow",
        "decode_avro_records",
        "is_avro_container",
        "read_single_record",
        "schema",
        "schema_json",
        "write_single_record",
    ],
    "hoodied.hoodie.metadata": [
        "METADATA_FOLDER",
        "MetadataTable",
        "MetadataWriter",
        "check_data_rollback",
        "metadata_table_in_use",
        "rollback_mdt_deltacommit",
        "rollback_mdt_for_data_rollback",
        "write_commit_to_metadata_table",
    ],
    "hoodied.hoodie.actions": ["TableService", "is_table_service", "service_of"],
    "hoodied.hoodie.demo": ["TableSpec", "TableWriter", "create_demo_table", "create_table"],
    "hoodied.executors": [
        "ArchivalResult",
        "CleanResult",
        "RollbackResult",
        "execute_archival",
        "execute_clean",
        "execute_rollback",
    ],
    "hoodied.planners": [
        "FailedAttempt",
        "find_failed_attempts",
        "is_table_service",
        "pending_rollback_for",
        "schedule_rollback",
    ],
}


def _modules(root: str) -> list[str]:
    package = importlib.import_module(root)
    names = [root]
    for info in pkgutil.walk_packages(package.__path__, prefix=f"{root}."):
        if not info.name.endswith(".__main__"):  # importing it runs the program
            names.append(info.name)
    return sorted(names)


ALL_MODULES = [m for root in ROOTS for m in _modules(root)]


def _spec(module: str) -> importlib.machinery.ModuleSpec:
    spec = importlib.util.find_spec(module)
    assert spec is not None, module
    return spec


def _is_package(module: str) -> bool:
    return _spec(module).submodule_search_locations is not None


def _package_of(module: str) -> str:
    """The package a module belongs to (a package's ``__init__`` belongs to the package itself)."""
    return module if _is_package(module) else module.rsplit(".", 1)[0]


@pytest.mark.parametrize("package", sorted(FACES))
def test_face_is_pinned(package: str) -> None:
    assert sorted(importlib.import_module(package).__all__) == sorted(FACES[package])


@pytest.mark.parametrize("module", ALL_MODULES)
def test_every_module_declares_all_and_every_name_exists(module: str) -> None:
    mod = importlib.import_module(module)
    exported = getattr(mod, "__all__", None)
    if exported is None and not module.startswith(ALL_REQUIRED):
        return
    assert exported is not None, f"{module} has no __all__"
    assert len(set(exported)) == len(exported), f"{module}.__all__ names a name twice"
    missing = [name for name in exported if not hasattr(mod, name)]
    assert not missing, f"{module}.__all__ names what it does not define: {missing}"


def test_executors_face_does_not_import_pyspark() -> None:
    code = "import sys, hoodied.executors; print(any(m.split('.')[0] == 'pyspark' for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _private_imports(module: str) -> list[str]:
    """Imports in ``module``'s source of another package's private module or private name."""
    path = Path(_spec(module).origin or "")
    here = _package_of(module)
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("hoodied."):
            targets = [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            targets = [(alias.name, "") for alias in node.names if alias.name.startswith("hoodied.")]
        else:
            continue
        for target, name in targets:
            full = f"{target}.{name}" if name else target
            try:
                target_module = full if importlib.util.find_spec(full) else target
            except ModuleNotFoundError:
                target_module = target  # ``name`` is an attribute, not a module
            if _package_of(target_module) == here:
                continue
            if any(part.startswith("_") for part in full.split(".")):
                found.append(f"{module}:{node.lineno} imports {full}")
    return found


@pytest.mark.parametrize("module", ALL_MODULES)
def test_no_private_imports_across_packages(module: str) -> None:
    assert _private_imports(module) == []
