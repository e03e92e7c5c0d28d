"""The documentation's generated pages match the code, and the hand-written pages name everything the
code can report: every job outcome, every one-line error class, every metric."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import pytest

from hoodied.hoodie.errors import HoodieServiceError
from hoodied.service.daemon.jobs import Outcome
from tests.docs.reference import CLI_PAGE, CONFIGURATION_PAGE, cli_reference, configuration_reference

DOCS = Path(__file__).resolve().parents[2] / "docs"
PROJECT = DOCS.parent
REGENERATE = "regenerate it with: .venv/bin/python -m tests.docs.reference"


def _headings(page: Path) -> set[str]:
    return {m.group(1).strip() for m in re.finditer(r"^#{2,4} (.+)$", page.read_text(), re.M)}


def test_configuration_reference_matches_the_settings_model() -> None:
    assert CONFIGURATION_PAGE.read_text() == configuration_reference(), REGENERATE


def test_cli_reference_matches_the_commands() -> None:
    assert CLI_PAGE.read_text() == cli_reference(), REGENERATE


def test_configuration_reference_has_every_environment_variable() -> None:
    from hoodied.service.config import _variables

    text = CONFIGURATION_PAGE.read_text()
    missing = [name for name in _variables() if f"`{name}`" not in text and "[]" not in name]
    assert not missing


def test_cli_reference_documents_every_command() -> None:
    from hoodied.service.cli.main import cli

    text = CLI_PAGE.read_text()
    assert sorted(cli.commands) == sorted(n for n in cli.commands if f"## hoodied {n}\n" in text)


def test_every_job_outcome_has_an_entry() -> None:
    headings = _headings(DOCS / "concepts" / "outcomes.md")
    assert {o.value for o in Outcome} <= headings


def _error_classes() -> set[type[HoodieServiceError]]:
    for top in ("hoodied.hoodie", "hoodied.planners", "hoodied.service"):  # the executors import pyspark:
        package = importlib.import_module(top)  # their one error class is listed below
        for module in pkgutil.walk_packages(package.__path__, top + "."):
            if not module.name.endswith("__main__"):
                importlib.import_module(module.name)
    from hoodied.executors.engine import SparkJobError

    found: set[type[HoodieServiceError]] = {HoodieServiceError, SparkJobError}
    todo = [HoodieServiceError]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub.__module__.startswith("hoodied.") and sub not in found:
                found.add(sub)
                todo.append(sub)
    return found


def test_every_error_class_has_a_troubleshooting_entry() -> None:
    headings = _headings(DOCS / "troubleshooting.md")
    missing = sorted(c.__name__ for c in _error_classes() if c.__name__ not in headings)
    assert not missing


def test_every_metric_has_a_row() -> None:
    source = (PROJECT / "service" / "daemon" / "metrics.py").read_text()
    names = set(re.findall(r'"(hoodied_[a-z_]+)"', source))
    counters = {"hoodied_jobs", "hoodied_plans", "hoodied_storage_requests",
                "hoodied_failed_writes_rolled_back", "hoodied_instants_archived"}
    names = {f"{n}_total" if n in counters else n for n in names}
    text = (DOCS / "operations" / "metrics.md").read_text()
    assert len(names) >= 24
    assert sorted(n for n in names if f"| `{n}` |" not in text) == []


@pytest.mark.parametrize("page", ["README.md"])
def test_front_page_is_short_and_links_into_the_site(page: str) -> None:
    text = (PROJECT / page).read_text()
    assert len(text.encode()) <= 12_500
    for target in ("docs/object-storage.md", "docs/writers.md", "docs/operations/table-controls.md",
                   "docs/troubleshooting.md", "docs/concepts/outcomes.md", "docs/operations/metrics.md",
                   "docs/operations/runbook.md"):
        assert f"]({target})" in text, target
        assert (PROJECT / target).is_file(), target


def test_an_error_line_names_its_troubleshooting_entry(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from hoodied.service.cli.main import TROUBLESHOOTING_URL, cli

    assert TROUBLESHOOTING_URL.endswith("/docs/troubleshooting.md")
    result = CliRunner().invoke(cli, ["inspect", str(tmp_path / "nowhere")])
    assert result.exit_code == 3
    line = result.stderr.strip()
    assert line.startswith("hoodied: error: ") and "\n" not in line
    assert line.endswith(f" (see: {TROUBLESHOOTING_URL}#tablenotfounderror)")
    assert "TableNotFoundError" in _headings(DOCS / "troubleshooting.md")  # mkdocs: its anchor
