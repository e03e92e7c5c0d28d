"""The daemon's commands: ``hoodied run``, ``hoodied status``, ``hoodied config check|schema``.

``run`` builds the settings with the precedence of ``service.config`` (file < environment <
these flags), sets up logging from them (the group's ``--log-format``, when given, wins) and
runs ``service.daemon.loop.Daemon`` until SIGTERM/SIGINT, or for one pass with ``--once`` (which
ends by printing the status of every table on standard output). ``--demo PATH`` creates the
demo table (``hoodie.demo.demo_table``) at PATH when it is not there yet and watches it with a policy
that keeps one file version, so one pass plans and executes its compaction and then the clean of
the slices the compaction replaced; logs default to the console format there.
Exit codes (``service.cli.exits``): 0 done (or stopped by a signal), 1 a ``--once`` pass that had a
failed job (or quarantined a table for it) or whose clock held work back, 2 invalid settings, 8 a
``--once`` pass that could not serve some table (``unserved``: a table never read in the pass, a
discover root missing or not listable; the other tables were served). ``run --once --json`` prints the
``/status`` document with a ``pass`` key: ``{"exit_code", "unserved": [{"kind", "path", "reason"}]}``.
``status`` and ``config check`` take ``--json`` too; ``render_status`` writes ages as a person reads
them and each reason once.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import structlog
import yaml
from click.core import ParameterSource

from hoodied.hoodie.human import format_age
from hoodied.hoodie.secrets import mask_secrets
from hoodied.service.cli.exits import EXIT_CONFIG, EXIT_ERROR, EXIT_UNSERVED
from hoodied.service.cli.options import echo_json
from hoodied.service.config import (
    ConfigError,
    DaemonConfig,
    chart_values_schema,
    load_config,
    read_settings_text,
    redacted_settings,
    settings_json_schema,
    unknown_environment,
)
from hoodied.service.logs import configure_logging
from hoodied.service.spark_jobs import SPARK_LOG_LEVELS

if TYPE_CHECKING:
    from hoodied.service.daemon.loop import Daemon

__all__ = ["COMMANDS", "config", "render_status", "run", "status", "unserved"]


def _config_failed(exc: ConfigError) -> None:
    for problem in exc.problems:
        click.echo(f"hoodied: invalid settings: {problem}", err=True)
    sys.exit(EXIT_CONFIG)


def _warn_unknown_environment() -> None:
    """A warning per HOODIED_* variable that is not a setting (a misspelt one would silently not apply)."""
    log = structlog.get_logger("hoodied.config")
    for variable in unknown_environment():
        log.warning("environment variable is not a setting: ignored", variable=variable.name,
                    did_you_mean=variable.suggestion)


def _flag_overrides(
    tables: tuple[str, ...], discover: tuple[str, ...], lock: str | None, spark: str | None,
    http: str | None, poll_interval: float | None, grace_period: float | None,
) -> dict[str, Any]:
    """The flags given on the command line, shaped like the settings file."""
    out: dict[str, Any] = {}
    if tables:
        out["tables"] = list(tables)
    if discover:
        out["discover"] = list(discover)
    if lock is not None:
        out["lock"] = {"url": lock}
    if spark is not None:
        out["spark"] = {"master": spark}
    if http is not None:
        out["http"] = {"address": http}
    if poll_interval is not None:
        out["poll_interval_seconds"] = poll_interval
    if grace_period is not None:
        out["grace_period_seconds"] = grace_period
    return out


@click.command(short_help="Run the daemon: watch tables, plan and execute their services.")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None,
              help="Settings file (YAML). HOODIED_* environment settings override it, "
              "these flags override both.")
@click.option("--table", "tables", multiple=True,
              help="A table to watch: a path or an object store URI such as s3://bucket/path "
              "(repeatable; replaces the file's list).")
@click.option("--discover", multiple=True,
              help="A folder or object store prefix (s3://bucket/lake) to search for tables (repeatable).")
@click.option("--lock", default=None,
              help="redis://HOST:PORT/DB (shared by replicas), or 'local': file locks for tables on a file "
                   "system; tables on object stores then take Hudi's storage-based lock.")
@click.option("--spark", default=None, help="Spark engine: local, local[N] or sc://HOST:PORT.")
@click.option("--http", default=None,
              help="HOST:PORT for /metrics, /healthz, /readyz, /status ('off': none).")
@click.option("--poll-interval", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Seconds between poll cycles.")
@click.option("--grace-period", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Seconds running jobs get after SIGTERM.")
@click.option("--once", is_flag=True,
              help="One pass (discover, plan, execute, wait for the jobs), print the status, exit: 0 all "
              "served, 1 a job failed, 8 a table unreadable or a discover root missing (see hoodied --help).")
@click.option("--json", "as_json", is_flag=True,
              help="With --once: print the status and the pass's result as one JSON document.")
@click.option("--spark-log-level", type=click.Choice(SPARK_LOG_LEVELS, case_sensitive=False), default=None,
              help="Level of a local Spark JVM's own log lines (default: the settings' spark.log_level, "
              "ERROR).")
@click.option("--demo", "demo_path", type=click.Path(file_okay=False), default=None,
              help="Create the demo table at PATH (unless it is there) and watch it (with any "
              "--table); HTTP is off unless --http is given.")
@click.pass_context
def run(ctx: click.Context, config_file: str | None, tables: tuple[str, ...], discover: tuple[str, ...],
        lock: str | None, spark: str | None, http: str | None, poll_interval: float | None,
        grace_period: float | None, once: bool, as_json: bool, spark_log_level: str | None,
        demo_path: str | None) -> None:
    """Watch the timelines of Hudi tables; execute every pending clean, compaction, log
    compaction, clustering and indexing instant whoever requested it (when hoodied has an
    executor for it), and plan new work by each table's policy.

    Settings: built-in defaults < --config FILE < HOODIED_* environment < these flags.
    """
    # the daemon's stack (anyio, prometheus, the registry) loads only for `run`
    import anyio

    from hoodied.service.daemon.loop import Daemon

    if as_json and not once:
        raise click.UsageError("--json needs --once (a daemon that keeps running prints no result)")
    overrides = _flag_overrides(tables, discover, lock, spark, http, poll_interval, grace_period)
    if spark_log_level is not None:
        overrides.setdefault("spark", {})["log_level"] = spark_log_level.upper()
    if demo_path is not None:
        _demo_overrides(demo_path, overrides, http)
    parent = ctx.parent
    if parent is not None and parent.get_parameter_source("log_format") is ParameterSource.COMMANDLINE:
        overrides["log"] = {"format": parent.params["log_format"]}
    if parent is not None and parent.params.get("debug"):
        overrides.setdefault("log", {})["level"] = "DEBUG"
    try:
        settings = load_config(config_file, overrides)
    except ConfigError as exc:
        _config_failed(exc)
        return
    configure_logging(settings.log.format, settings.log.level)
    _warn_unknown_environment()
    if not settings.tables and not settings.discover:
        click.echo("hoodied: error: no tables: give --table PATH, --discover ROOT or a --config file",
                   err=True)
        sys.exit(EXIT_CONFIG)
    daemon = Daemon(settings, once=once)
    code = anyio.run(lambda: daemon.run(handle_signals=True))
    if once:
        missed = unserved(daemon)
        if missed:
            code = EXIT_UNSERVED
        if as_json:
            echo_json({**daemon.status(), "pass": {"exit_code": code, "unserved": missed}})
        else:
            click.echo(render_status(daemon.status()))
            for m in missed:
                click.echo(f"not served: {m['kind'].replace('_', ' ')} {m['path']}: {m['reason']}")
    if daemon.abandoned:
        # worker threads of abandoned jobs are still running: leave without waiting for them
        logging.shutdown()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


#: The demo table's policy: keep one file version, so the slices its compaction replaces are cleaned at
#: once (under KEEP_LATEST_COMMITS Hudi keeps the slice the earliest retained commit reads).
DEMO_POLICY = {"services": {"clean": {"policy": "KEEP_LATEST_FILE_VERSIONS", "file_versions_retained": 1}}}


def _demo_overrides(path: str, overrides: dict[str, Any], http: str | None) -> None:
    """Create the demo table at ``path`` when needed and add it (with ``DEMO_POLICY``) to the tables."""
    from hoodied.hoodie.demo.demo_table import create_demo_table, demo_location

    location, exists = demo_location(path)
    if not exists:
        summary = create_demo_table(path)
        click.echo(f"created the demo table at {summary['path']}: {summary['table_type']}, "
                   f"{len(summary['instants'])} delta commits, {summary['rows']} rows in "
                   f"{summary['base_files']} base files and {summary['log_files']} log files", err=True)
    entry = {"path": location, "policy": DEMO_POLICY}
    overrides["tables"] = [*overrides.get("tables", []), entry]
    if http is None:
        overrides["http"] = {"address": "off"}
    if "HOODIED_LOG__FORMAT" not in os.environ:
        overrides["log"] = {"format": "console"}


def _get(url: str, timeout: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - http only, built here
        return bytes(response.read())


def _ago(at: float | None, now: float) -> str:
    return "never" if at is None else f"{format_age(now - at)} ago"


def _times(n: int) -> str:
    return f" ({n} times)" if n > 1 else ""


def _said(text: str, said: list[str]) -> bool:
    """Whether ``text`` was printed already, or is part of (or holds) a line printed already."""
    return any(s and (s in text or text in s) for s in said)


def render_status(doc: dict[str, Any], now: float | None = None) -> str:
    """The ``/status`` document as short text lines: ages as a person reads them (``339 d``), and
    one line per reason: an outcome or error repeated is printed once with how many times."""
    now = time.time() if now is None else now
    lines = [
        f"replica {doc['replica']}  lock {doc['lock']}  "
        f"workers {doc['workers']['busy']}/{doc['workers']['limit']}"
        f"  last poll {_ago(doc['last_poll']['ended_at'], now)}"
        + (f"  DRAINING ({doc['stop_reason']})" if doc["draining"] else ""),
        f"{doc['tables_watched']} tables, {doc['tables_quarantined']} quarantined",
    ]
    said: dict[str, list[str]] = {}
    for t in doc["tables"]:
        lines.extend(_table_lines(t, now, said.setdefault(t["path"], []), doc["lock"], doc["replica"]))
    errors: Counter[tuple[str, str]] = Counter()
    newest: dict[tuple[str, str], float] = {}
    for e in doc["recent_errors"]:
        key = (e["table"], e["error"])
        if _said(e["error"].removeprefix("quarantined: "), said.get(e["table"], [])):
            continue
        errors[key] += 1
        newest.setdefault(key, e["at"])
    if errors:
        lines.append("recent errors:")
        lines.extend(f"  {_ago(newest[key], now)} {key[0]}: {key[1]}{_times(n)}"
                     for key, n in list(errors.items())[:5])
    return "\n".join(lines)


def _table_lines(t: dict[str, Any], now: float, said: list[str], lock: str, replica: str) -> list[str]:
    """One table's lines; ``said`` collects the reasons and messages printed, for the error list.
    ``lock`` and ``replica``: the daemon's, so a table's own lock and other replicas' jobs stand out."""
    head = f"{t['path']}"
    if t["name"]:
        head += f"  ({t['name']}, {t['type']}, v{t['version']})"
    if t["paused"]:
        head += "  PAUSED"
        pause = t.get("pause")
        if pause:
            when = f" {_ago(pause['at'], now)}" if pause.get("at") else ""
            why = f": {pause['reason']}" if pause.get("reason") else ""
            head += f" by {pause['by']}{when}{why}"
    lines = [head]
    if t.get("lock") and t["lock"] != lock:
        lines.append(f"  lock: {t['lock']}")
    if t["quarantined"]:
        lines.append(f"  QUARANTINED: {t['quarantined']}")
        said.append(t["quarantined"])
        q = t.get("quarantine") or {}
        if q.get("next_retry_at"):
            lines.append(f"  next retry in {format_age(q['next_retry_at'] - now)} "
                         f"({q['retries']} retries found the cause still there)")
    if t["running"]:
        r = t["running"]
        what = f"{r['kind']} {r['action']} {r['instant'] or ''}".rstrip()
        lines.append(f"  running: {what} for {format_age(r['seconds'])}")
    for p in t["pending"]:
        note = f": {p['note']}" if p["note"] else ""
        lines.append(f"  pending {p['instant']} {p['action']} {p['state']} "
                     f"({format_age(p['age_seconds'])} old): {p['status']}{note}")
    for service, note in t["planning"].items():
        lines.append(f"  plan {service}: {note}")
        said.append(note)
    outcomes: Counter[tuple[str, str | None, str, str]] = Counter()
    newest: dict[tuple[str, str | None, str, str], float] = {}
    for o in t["last_outcomes"]:
        key = (o["action"], o["instant"], o["outcome"], o["message"])
        outcomes[key] += 1
        newest.setdefault(key, o["at"])
    shown = 0
    for key, n in outcomes.items():
        action, instant, outcome, message = key
        if shown == 3 or _said(message, said):
            continue
        what = f"{action} {instant}" if instant else f"{action} plan"
        lines.append(f"  {_ago(newest[key], now)}: {what}: {outcome}: {message}{_times(n)}")
        said.append(message)
        shown += 1
    # the shared history: the newest job another replica ran (this replica's are the outcomes above)
    other = next((h for h in t.get("history") or [] if h["replica"] != replica), None)
    if other is not None:
        what = f"{other['action']} {other['instant']}" if other["instant"] else f"{other['action']} plan"
        lines.append(f"  {_ago(other['finished_at'], now)}: {what}: {other['outcome']} on {other['replica']}"
                     f" ({format_age(other['seconds'])})")
    return lines


def unserved(daemon: Daemon) -> list[dict[str, str]]:
    """What a ``run --once`` pass could not serve: ``{"kind": "table" | "discover_root", "path",
    "reason"}`` for each table that was never read in the pass (unreadable, quarantined, storage
    failing) and each discover root that is missing or could not be listed."""
    out = []
    for root in daemon.settings.discover:
        path = root.root.removeprefix("file://")
        local = None if "://" in path else path  # an object-store prefix is never "missing": it is listed
        if root.root in daemon.unlisted_roots:
            out.append({"kind": "discover_root", "path": root.root, "reason": "could not be listed"})
        elif local is not None and not os.path.isdir(local):
            out.append({"kind": "discover_root", "path": root.root, "reason": "missing"})
    errors: dict[str, str] = {}
    for e in reversed(daemon.recent_errors):  # oldest first: the newest error of a table wins
        errors[e["table"]] = e["error"]
    for uri, ts in sorted(daemon.tables.items()):
        if ts.poll is None:
            reason = ts.quarantine or errors.get(uri) or "not read"
            out.append({"kind": "table", "path": uri, "reason": reason})
    return out


@click.command(short_help="Show a running daemon's tables, pending work, jobs and quarantines.")
@click.option("--http", default=None, help="HOST:PORT of the daemon (default: from --config / environment).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None, help="Settings file.")
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's /status JSON.")
def status(http: str | None, config_file: str | None, as_json: bool) -> None:
    """Ask a running daemon (its /status endpoint) what it is doing."""
    address = http
    if address is None:
        try:
            address = load_config(config_file).http.address
        except ConfigError as exc:
            _config_failed(exc)
            return
        if address is None:
            click.echo("hoodied: error: HTTP is off in the settings; give --http HOST:PORT", err=True)
            sys.exit(EXIT_CONFIG)
    url = f"http://{address}/status"
    try:
        body = _get(url)
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        click.echo(f"hoodied: error: no daemon answers at {url}: {reason}", err=True)
        sys.exit(EXIT_ERROR)
    doc = json.loads(body)
    if as_json:
        echo_json(doc)
    else:
        click.echo(render_status(doc))


@click.group()
def config() -> None:
    """Check daemon settings."""


@config.command("check")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--print", "show", is_flag=True,
              help="Print the effective settings (file + environment) as YAML.")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON document: {file, valid, problems, summary} (--print: the settings).")
def config_check(file: str, show: bool, as_json: bool) -> None:
    """Validate the settings FILE (with the HOODIED_* environment applied, as `run` would).

    Every problem is reported at once and once, with the file key or HOODIED_* variable it comes from;
    a HOODIED_* variable that is not a setting is a problem too. Secrets are shown as ***.
    """
    problems = [str(variable) for variable in unknown_environment()]
    settings: DaemonConfig | None = None
    try:
        settings = load_config(file)
    except ConfigError as exc:
        problems = [*exc.problems, *problems]
    if settings is None or problems:
        if as_json:
            echo_json({"file": file, "valid": False, "problems": problems, "summary": None})
        _config_failed(ConfigError(problems))
        return
    if show:
        shown = redacted_settings(settings)
        if as_json:
            echo_json(shown)
        else:
            click.echo(yaml.safe_dump(shown, sort_keys=False).rstrip())
        return
    lock = mask_secrets(settings.lock.url)
    if as_json:
        echo_json({"file": file, "valid": True, "problems": [], "summary": {
            "tables": len(settings.tables), "discover_roots": len(settings.discover),
            "lock": lock, "http": settings.http.address, "workers": settings.concurrency.workers,
        }})
        return
    http = settings.http.address or "off"
    click.echo(f"{file}: ok: {len(settings.tables)} tables, {len(settings.discover)} discover roots, "
               f"lock {lock}, http {http}, {settings.concurrency.workers} workers")


@config.command("schema")
@click.option("--chart", type=click.Path(dir_okay=False, exists=True), default=None,
              help="Write the schema into this Helm values schema as the schema of its `config` value "
                   "(helm/hoodied/values.schema.json), instead of printing it.")
def config_schema(chart: str | None) -> None:
    """Print the JSON Schema of the settings file: what `config check` takes, as far as a schema can
    say it (for editors, and the Helm chart's check of its `config` value)."""
    if chart is None:
        echo_json(settings_json_schema())
        return
    path = Path(chart)
    try:
        values = json.loads(read_settings_text(path))
    except json.JSONDecodeError as exc:
        raise ConfigError([f"{chart}:{exc.lineno}: not JSON: {exc.msg}"]) from None
    if not isinstance(values, dict):
        raise ConfigError([f"{chart}: a values schema is a JSON object, not {type(values).__name__}"])
    doc = chart_values_schema(values)
    path.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    click.echo(f"{chart}: the schema of `config` is the settings file's", err=True)


#: Commands for ``service.cli.main`` to add to its group.
COMMANDS = [run, status, config]
