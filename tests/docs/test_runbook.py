"""Every alert of the Prometheus rules (and so of the chart's PrometheusRule, which the deploy tests
hold equal to them) links its entry of the alerts runbook, and every entry is an alert."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

PROJECT = Path(__file__).resolve().parents[2]
RULES = PROJECT / "deploy" / "prometheus" / "rules.yaml"
RUNBOOK = PROJECT / "docs" / "operations" / "runbook.md"
#: Where the runbook is read: the repository named by the chart's ``home`` and the image's source label.
RUNBOOK_URL = "https://github.com/hoodied/hoodied/blob/main/docs/operations/runbook.md"


def _alerts() -> dict[str, dict[str, str]]:
    rules = yaml.safe_load(RULES.read_text())
    return {r["alert"]: r["annotations"] for g in rules["groups"] for r in g["rules"] if "alert" in r}


def test_every_alert_has_a_runbook_url_to_its_entry() -> None:
    entries = set(re.findall(r"^## (Hoodied\w+)$", RUNBOOK.read_text(), re.M))
    alerts = _alerts()
    assert len(alerts) >= 12
    assert {a: n.get("runbook_url") for a, n in alerts.items()} == {
        a: f"{RUNBOOK_URL}#{a.lower()}" for a in alerts}
    assert entries == set(alerts)


def test_chart_readme_names_the_deployment_as_the_chart_names_it() -> None:
    readme = " ".join((PROJECT / "helm" / "hoodied" / "README.md").read_text().split())
    helpers = (PROJECT / "helm" / "hoodied" / "templates" / "_helpers.tpl").read_text()
    # the full name is the release name alone when it already contains the chart's name
    assert 'contains (include "hoodied.name" .) .Release.Name' in helpers
    assert "kubectl delete deployment <release>-hoodied`" not in readme
    assert "<release>-hoodied" in readme and "a release named `hoodied`" in readme
