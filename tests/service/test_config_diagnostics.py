"""What ``config check`` and ``run`` say about bad settings: every problem at once, each once, where it
comes from (a file key, a ``HOODIED_*`` variable), the closest valid name of a misspelt key or variable,
and never a secret; and the settings' JSON Schema agreeing with ``config check`` (the Helm chart embeds it).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from click.testing import CliRunner, Result

from hoodied.service.cli.main import cli
from hoodied.service.config import (
    ConfigError,
    load_config,
    settings_json_schema,
    unknown_environment,
)
from hoodied.service.daemon.loop import Daemon

PROJECT = Path(__file__).resolve().parents[2]
SECRET = "s3cr3t-pa55"


@pytest.fixture(autouse=True)
def _no_hoodied_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The machine's own HOODIED_* variables (settings or not) stay out of these tests."""
    for name in list(os.environ):
        if name.upper().startswith("HOODIED_"):
            monkeypatch.delenv(name)


def _check(path: Path, *extra: str) -> Result:
    return CliRunner().invoke(cli, ["config", "check", *extra, str(path)])


def _problems(result: Result) -> list[str]:
    prefix = "hoodied: invalid settings: "
    return [line.removeprefix(prefix) for line in result.stderr.splitlines() if line.startswith(prefix)]


def test_a_typo_in_defaults_is_reported_once_not_once_per_table(tmp_path: Path) -> None:
    settings = tmp_path / "hoodied.yaml"
    settings.write_text(
        "tables:\n  - /data/a\n  - /data/b\n  - path: /data/c\n    policy: {priority: 2}\n"
        "discover: [/data/lake]\n"
        "defaults:\n  services:\n    clean: {commits_retaind: 3}\n"
    )
    result = _check(settings)
    assert result.exit_code == 2
    assert _problems(result) == [
        f"{settings}: defaults.services.clean.commits_retaind: unknown setting "
        "(did you mean commits_retained?)"
    ]
    # a table's own bad key is its own problem, named by its entry
    settings.write_text("tables:\n  - /data/a\n  - path: /data/c\n    policy: {priorty: 2}\n")
    assert _problems(_check(settings)) == [
        f"{settings}: tables.1.policy.priorty: unknown setting (did you mean priority?)"
    ]


def test_every_problem_is_reported_together_with_where_it_comes_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = tmp_path / "hoodied.yaml"
    settings.write_text(
        "tables: [/data/a, /data/a]\n"
        "poll_interval_secnds: 5\n"
        "retry: {backoff_seconds: 0}\n"
    )
    monkeypatch.setenv("HOODIED_CONCURRENCY__WORKERS", "many")
    with pytest.raises(ConfigError) as refused:
        load_config(settings)
    assert refused.value.problems == [
        f"{settings}: tables: Value error, table /data/a is listed twice",
        "HOODIED_CONCURRENCY__WORKERS: concurrency.workers: Input should be a valid integer, unable to parse "
        "string as an integer (got 'many')",
        f"{settings}: retry.backoff_seconds: Input should be greater than 0 (got 0)",
        f"{settings}: poll_interval_secnds: unknown setting (did you mean poll_interval_seconds?)",
    ]
    assert str(refused.value).endswith("(and 3 more)")
    result = _check(settings)
    assert result.exit_code == 2 and _problems(result) == refused.value.problems


def test_an_unknown_hoodied_variable_is_named_with_the_closest_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = tmp_path / "hoodied.yaml"
    settings.write_text("tables: [/data/a]\n")
    monkeypatch.setenv("HOODIED_POLL_INTERVL_SECONDS", "5")
    monkeypatch.setenv("HOODIED_CONCURRENCY__WORKRS", "2")
    # not settings, and not reported: a test hook, the test suite's folders, the service links Kubernetes
    # adds for a Service "hoodied"
    for name in ("HOODIED_TEST_PAUSE_AT", "HOODIED_FIXTURES", "HOODIED_REFERENCE",
                 "HOODIED_SERVICE_HOST", "HOODIED_SERVICE_PORT_METRICS",
                 "HOODIED_PORT", "HOODIED_PORT_9464_TCP_ADDR", "HOODIED_SPARK_CONNECT_SERVICE_PORT"):
        monkeypatch.setenv(name, "10.0.0.1")
    # settings: a key of an open mapping, and a shorthand
    monkeypatch.setenv("HOODIED_SPARK__CONF__spark.executor.memory", "4g")
    monkeypatch.setenv("HOODIED_LOCK", "redis://127.0.0.1:6379/0")

    assert [str(v) for v in unknown_environment()] == [
        "HOODIED_CONCURRENCY__WORKRS: not a setting (did you mean HOODIED_CONCURRENCY__WORKERS?)",
        "HOODIED_POLL_INTERVL_SECONDS: not a setting (did you mean HOODIED_POLL_INTERVAL_SECONDS?)",
    ]
    loaded = load_config(settings)  # run ignores them: the settings are valid
    assert loaded.spark.conf == {"spark.executor.memory": "4g"} and loaded.lock.url == "redis://127.0.0.1:6379/0"
    assert loaded.poll_interval_seconds == 10 and loaded.concurrency.workers == 4

    result = _check(settings)
    assert result.exit_code == 2
    assert "HOODIED_POLL_INTERVL_SECONDS: not a setting (did you mean HOODIED_POLL_INTERVAL_SECONDS?)" in \
        _problems(result)
    assert len(_problems(result)) == 2

    # run starts anyway, with one warning per variable in its start-up log (here it then stops: no tables)
    started = CliRunner().invoke(cli, ["run", "--http", "off"])
    warnings = [json.loads(line) for line in started.stderr.splitlines() if line.startswith("{")]
    assert {(w["level"], w["variable"], w["did_you_mean"]) for w in warnings} == {
        ("warning", "HOODIED_POLL_INTERVL_SECONDS", "HOODIED_POLL_INTERVAL_SECONDS"),
        ("warning", "HOODIED_CONCURRENCY__WORKRS", "HOODIED_CONCURRENCY__WORKERS"),
    }
    assert started.exit_code == 2 and "no tables" in started.stderr


@pytest.mark.parametrize("source", ["file", "environment"])
def test_secrets_are_masked_in_validation_errors(
    source: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pydantic's messages echo the input: a bad value next to a secret, or of a secret, never shows it."""
    bad = {
        "lock": {"url": f"redis:/hoodied:{SECRET}@127.0.0.1:6379/0"},  # mistyped scheme, echoed by the check
        "spark": {"master": f"sc://spark 15002/;token={SECRET}",
                  "conf": {"spark.hadoop.fs.s3a.secret.key": 123456789}},
        "controls": {"http_token": 987654321},
    }
    settings = tmp_path / "hoodied.yaml"
    if source == "file":
        settings.write_text(yaml.safe_dump(bad))
    else:
        settings.write_text("{}\n")
        for group, values in bad.items():
            monkeypatch.setenv(f"HOODIED_{group.upper()}", json.dumps(values))
    result = _check(settings)
    problems = _problems(result)
    assert result.exit_code == 2 and len(problems) == 4, problems
    where = str(settings) if source == "file" else "HOODIED_"
    assert all(p.startswith(where) for p in problems), problems
    text = result.output + result.stderr
    for secret in (SECRET, "123456789", "987654321"):
        assert secret not in text
    assert "redis:/hoodied:***@127.0.0.1" in text and ";token=***" in text


def test_secrets_are_masked_wherever_settings_are_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = tmp_path / "hoodied.yaml"
    settings.write_text(yaml.safe_dump({
        "tables": [str(tmp_path / "t")], "http": "off",
        "spark": {"master": f"sc://spark:15002/;user_id=hoodied;token={SECRET}",
                  "conf": {"spark.hadoop.fs.s3a.secret.key": SECRET, "spark.driver.memory": "2g"}},
        "controls": {"local_store": str(tmp_path / "controls.sqlite")},
    }))
    monkeypatch.setenv("HOODIED_LOCK__URL", f"rediss://hoodied:{SECRET}@127.0.0.1:6380/0?password={SECRET}")
    monkeypatch.setenv("HOODIED_CONTROLS__HTTP_TOKEN", SECRET)
    for extra in ([], ["--print"], ["--print", "--json"], ["--json"]):
        result = _check(settings, *extra)
        assert result.exit_code == 0, result.stderr
        assert SECRET not in result.output + result.stderr
    shown = yaml.safe_load(_check(settings, "--print").output)
    assert shown["lock"]["url"] == "rediss://hoodied:***@127.0.0.1:6380/0?password=***"
    assert shown["spark"]["master"] == "sc://spark:15002/;user_id=hoodied;token=***"
    assert shown["spark"]["conf"] == {"spark.hadoop.fs.s3a.secret.key": "***", "spark.driver.memory": "2g"}
    assert shown["controls"]["http_token"] == "***"
    # the daemon's /status document
    monkeypatch.delenv("HOODIED_LOCK__URL")
    doc = Daemon(load_config(settings), once=True).status()
    assert doc["engine"]["master"] == "sc://spark:15002/;user_id=hoodied;token=***"
    assert SECRET not in json.dumps(doc, default=str)


# ---------------------------------------------------------------- the JSON Schema

#: Settings files both ``config check`` and the schema take: the shorthands and any-case levels included.
VALID: list[dict[str, Any]] = [
    {},
    {"tables": ["/data/a", {"path": "/data/b", "policy": {"priority": 3, "services": {"clean": {
        "policy": "KEEP_LATEST_FILE_VERSIONS", "file_versions_retained": 1}}}}],
     "discover": ["/data/lake", {"root": "/data/other", "max_depth": 2, "policy": {"paused": True}}]},
    {"lock": "redis://redis:6379/0", "http": "0.0.0.0:9464", "log": {"level": "debug", "format": "console"}},
    {"http": False, "lock": {"url": "local", "wait_ms": 0}},
    {"http": None, "spark": {"master": "local[2]", "conf": {"spark.driver.memory": "2g"}}},
    {"defaults": {"services": {"clustering": {"schedule": True, "sort_columns": "a,b"},
                               "compaction": {"trigger": "NUM_OR_TIME", "delta_seconds": 60}}},
     "concurrency": {"workers": 8, "per_service": {"compaction": 3}}},
]
#: Settings files both refuse, each for one reason.
INVALID: list[dict[str, Any]] = [
    {"poll_interval_secnds": 5},
    {"defaults": {"services": {"clean": {"commits_retaind": 3}}}},
    {"tables": [{"path": "/data/a", "policy": {"priorty": 1}}]},
    {"tables": [{"root": "/data/a"}]},
    {"concurrency": {"workers": 0}},
    {"concurrency": {"per_service": {"compactoin": 1}}},
    {"defaults": {"services": {"compaction": {"trigger": "SOMETIMES"}}}},
    {"log": {"level": "LOUD"}},
    {"retry": {"backoff_seconds": 0}},
    {"http": True},
    {"tables": "/data/a"},
    {"spark": {"conf": {"spark.driver.memory": ["2g"]}}},
]


def _config_check_accepts(doc: dict[str, Any], tmp_path: Path) -> bool:
    path = tmp_path / "settings.yaml"
    path.write_text(yaml.safe_dump(doc))
    try:
        load_config(path)
    except ConfigError:
        return False
    return True


@pytest.mark.parametrize("doc", VALID + INVALID, ids=[f"valid{i}" for i in range(len(VALID))]
                         + [f"invalid{i}" for i in range(len(INVALID))])
def test_the_schema_agrees_with_config_check(doc: dict[str, Any], tmp_path: Path) -> None:
    schema = settings_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    by_schema = jsonschema.Draft202012Validator(schema).is_valid(doc)
    by_check = _config_check_accepts(doc, tmp_path)
    assert by_schema == by_check == (doc in VALID)


def test_the_example_settings_file_passes_the_schema() -> None:
    doc = yaml.safe_load((PROJECT / "deploy" / "hoodied.yaml").read_text())
    jsonschema.Draft202012Validator(settings_json_schema()).validate(doc)


def test_config_schema_prints_the_schema_and_writes_it_into_a_chart(tmp_path: Path) -> None:
    printed = CliRunner().invoke(cli, ["config", "schema"])
    assert printed.exit_code == 0 and json.loads(printed.output) == settings_json_schema()
    chart = tmp_path / "values.schema.json"
    chart_owned = {"not": {"required": ["grace_period_seconds"]}}
    chart.write_text(json.dumps({"type": "object", "properties": {
        "replicas": {"type": "integer"}, "config": {"type": "object", **chart_owned},
    }}))
    written = CliRunner().invoke(cli, ["config", "schema", "--chart", str(chart)])
    assert written.exit_code == 0, written.stderr
    doc = json.loads(chart.read_text())
    config = doc["properties"]["config"]
    assert doc["properties"]["replicas"] == {"type": "integer"}
    assert config["not"] == {"required": ["grace_period_seconds"]}  # the chart's own rule is kept
    assert config["properties"]["lock"]["anyOf"][0] == {"$ref": "#/properties/config/$defs/LockConfig"}
    validator = jsonschema.Draft202012Validator(doc)
    assert validator.is_valid({"replicas": 1, "config": {"tables": ["/data/a"]}})
    assert not validator.is_valid({"config": {"defaults": {"services": {"clean": {"commits_retaind": 3}}}}})
    assert not validator.is_valid({"config": {"grace_period_seconds": 5}})
    before = chart.read_text()
    assert CliRunner().invoke(cli, ["config", "schema", "--chart", str(chart)]).exit_code == 0
    assert chart.read_text() == before  # regenerating changes nothing



def _one_problem(result: Result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize(
    "command",
    [["config", "check", "{file}"], ["run", "--config", "{file}", "--once"], ["status", "--config", "{file}"],
     ["table", "show", "--config", "{file}"]],
    ids=["config-check", "run", "status", "table-show"],
)
def test_a_settings_file_that_is_not_utf8_is_one_usage_line(tmp_path: Path, command: list[str]) -> None:
    settings = tmp_path / "hoodied.yaml"
    settings.write_bytes("tables:\n  - /data/café\n".encode("latin-1"))  # an editor saving in Latin-1
    result = CliRunner().invoke(cli, [arg.format(file=settings) for arg in command])
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)  # no traceback
    assert _one_problem(result).endswith(f"{settings}:2: not UTF-8 text (byte 0xe9 at offset 21)")


def test_a_chart_schema_that_is_not_utf8_or_not_json_is_one_usage_line(tmp_path: Path) -> None:
    chart = tmp_path / "values.schema.json"
    for content, problem in (
        (b'{"title": "caf\xe9"}', ":1: not UTF-8 text (byte 0xe9 at offset 14)"),
        (b'{"title": ', ":1: not JSON"),
        (b"[]", "a values schema is a JSON object, not list"),
    ):
        chart.write_bytes(content)
        result = CliRunner().invoke(cli, ["config", "schema", "--chart", str(chart)])
        assert result.exit_code == 2, result.output
        assert isinstance(result.exception, SystemExit)
        line = _one_problem(result)
        assert line.startswith(f"hoodied: error: {chart}") and problem in line, line
        assert chart.read_bytes() == content  # left as it was
