"""The daemon's commands: ``hoodied run``, ``hoodied status``, ``hoodied config check``.

``run`` builds the settings with the precedence of ``service.config`` (file < environment <
these flags), sets up logging from them (the group's ``--log-format``, when given, wins) and
runs ``service.daemon.loop.Daemon`` until SIGTERM/SIGINT, or for one pass with ``--once`` (which
ends by printing the status of every table on standard output). ``--demo PATH`` creates the
demo table (``hoodie.demo.demo_table``) at PATH when it is not there yet and watches it with a policy
that keeps one file version, so one pass plans and executes its compaction and then the clean of
the slices the compaction replaced; logs default to the console format there.
Exit codes: 0 done (or stopped by a signal), 1 ``--once`` pass that quarantined a table or
had a failed job, 2 invalid settings.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import urllib.error
import urllib.request
from typing import Any

import click
import yaml
from click.core import ParameterSource

from hoodied.service.config import ConfigError, DaemonConfig, load_config
from hoodied.service.locks import redacted_url
from hoodied.service.logs import configure_logging

__all__ = ["COMMANDS", "config", "render_status", "run", "status"]

EXIT_CONFIG = 2


def _config_failed(exc: ConfigError) -> None:
    for problem in exc.problems:
        click.echo(f"hoodied: invalid settings: {problem}", err=True)
    sys.exit(EXIT_CONFIG)


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
              help="One pass (discover, plan, execute, wait for the jobs), print the status, exit.")
@click.option("--demo", "demo_path", type=click.Path(file_okay=False), default=None,
              help="Create the demo table at PATH (unless it is there) and watch it (with any "
              "--table); HTTP is off unless --http is given.")
@click.pass_context
def run(ctx: click.Context, config_file: str | None, tables: tuple[str, ...], discover: tuple[str, ...],
        lock: str | None, spark: str | None, http: str | None, poll_interval: float | None,
        grace_period: float | None, once: bool, demo_path: str | None) -> None:
    """Watch the timelines of Hudi tables; execute every pending clean, compaction, log
    compaction, clustering and indexing instant whoever requested it (when hoodied has an
    executor for it), and plan new work by each table's policy.

    Settings: built-in defaults < --config FILE < HOODIED_* environment < these flags.
    """
    # the daemon's stack (anyio, prometheus, the registry) loads only for `run`
    import anyio

    from hoodied.service.daemon.loop import Daemon

    overrides = _flag_overrides(tables, discover, lock, spark, http, poll_interval, grace_period)
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
    if not settings.tables and not settings.discover:
        click.echo("hoodied: error: no tables: give --table PATH, --discover ROOT or a --config file",
                   err=True)
        sys.exit(EXIT_CONFIG)
    daemon = Daemon(settings, once=once)
    code = anyio.run(lambda: daemon.run(handle_signals=True))
    if once:
        click.echo(render_status(daemon.status()))
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


def _ago(at: float | None) -> str:
    return "never" if at is None else f"{time.time() - at:.0f} s ago"


def render_status(doc: dict[str, Any]) -> str:
    """The ``/status`` document as short text lines."""
    lines = [
        f"replica {doc['replica']}  lock {doc['lock']}  "
        f"workers {doc['workers']['busy']}/{doc['workers']['limit']}"
        f"  last poll {_ago(doc['last_poll']['ended_at'])}"
        + (f"  DRAINING ({doc['stop_reason']})" if doc["draining"] else ""),
        f"{doc['tables_watched']} tables, {doc['tables_quarantined']} quarantined",
    ]
    for t in doc["tables"]:
        head = f"{t['path']}"
        if t["name"]:
            head += f"  ({t['name']}, {t['type']}, v{t['version']})"
        if t["paused"]:
            head += "  PAUSED"
        lines.append(head)
        if t["quarantined"]:
            lines.append(f"  QUARANTINED: {t['quarantined']}")
        if t["running"]:
            r = t["running"]
            what = f"{r['kind']} {r['action']} {r['instant'] or ''}".rstrip()
            lines.append(f"  running: {what} for {r['seconds']} s")
        for p in t["pending"]:
            note = f": {p['note']}" if p["note"] else ""
            lines.append(f"  pending {p['instant']} {p['action']} {p['state']} "
                         f"({p['age_seconds']:.0f} s old): {p['status']}{note}")
        for service, note in t["planning"].items():
            lines.append(f"  plan {service}: {note}")
        for o in t["last_outcomes"][:3]:
            what = f"{o['action']} {o['instant']}" if o["instant"] else f"{o['action']} plan"
            lines.append(f"  {_ago(o['at'])}: {what}: {o['outcome']}: {o['message']}")
    if doc["recent_errors"]:
        lines.append("recent errors:")
        lines.extend(f"  {_ago(e['at'])} {e['table']}: {e['error']}" for e in doc["recent_errors"][:5])
    return "\n".join(lines)


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
        sys.exit(1)
    doc = json.loads(body)
    if as_json:
        click.echo(json.dumps(doc, indent=2))
    else:
        click.echo(render_status(doc))


@click.group()
def config() -> None:
    """Check daemon settings."""


@config.command("check")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--print", "show", is_flag=True,
              help="Print the effective settings (file + environment) as YAML.")
def config_check(file: str, show: bool) -> None:
    """Validate the settings FILE (with the HOODIED_* environment applied, as `run` would)."""
    try:
        settings: DaemonConfig = load_config(file)
    except ConfigError as exc:
        _config_failed(exc)
        return
    if show:
        shown = settings.model_dump(mode="json")
        shown["lock"]["url"] = redacted_url(settings.lock.url)  # a password is never shown
        click.echo(yaml.safe_dump(shown, sort_keys=False).rstrip())
        return
    http = settings.http.address or "off"
    click.echo(f"{file}: ok: {len(settings.tables)} tables, {len(settings.discover)} discover roots, "
               f"lock {redacted_url(settings.lock.url)}, http {http}, {settings.concurrency.workers} workers")


#: Commands for ``service.cli.main`` to add to its group.
COMMANDS = [run, status, config]
