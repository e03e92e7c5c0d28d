"""``hoodied table``: pause, resume, release and look at one table's controls shared by the daemon's replicas.

The commands reach the store the daemon uses (``service.table_controls.open_store``), found from the
same settings as ``hoodied run`` (``--config`` file < ``HOODIED_*`` environment): Redis when
``lock.url`` is Redis, else the local SQLite file ``controls.local_store``. A running daemon follows a
change at its next poll cycle; no daemon needs to run. TABLE is the table's path or URI as the
settings name it (a listed table, or one under a discover root).

- ``pause TABLE [--reason TEXT]``: the daemon keeps polling and reporting the table but plans and
  executes nothing on it (a job already running finishes);
- ``resume TABLE``: undo ``pause``;
- ``release TABLE``: lift a quarantine (the daemon serves the table again with fresh retry counts);
- ``history TABLE [--limit N] [--json]``: the table's last jobs, newest first, from every replica;
- ``show [--json]``: every paused or quarantined table.

Errors are the typed ones of ``service.table_controls`` (an unknown table: exit 3; the store
unreachable: exit 6, ``service.cli.main``); invalid settings exit 2 as for ``run``.
"""

from __future__ import annotations

import getpass
import json
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any

import click

from hoodied.service.cli.daemon import _config_failed
from hoodied.service.config import ConfigError, DaemonConfig, load_config
from hoodied.service.table_controls import ControlStore, Pause, open_store, resolve_table

__all__ = ["table"]

_config_option = click.option(
    "--config", "config_file", type=click.Path(dir_okay=False), default=None,
    help="Settings file of the daemon (HOODIED_* environment settings override it).",
)
_json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def _settings(config_file: str | None) -> DaemonConfig:
    try:
        return load_config(config_file)
    except ConfigError as exc:
        _config_failed(exc)
        raise  # not reached: _config_failed exits


@contextmanager
def _store(settings: DaemonConfig) -> Iterator[ControlStore]:
    store = open_store(settings)
    try:
        yield store
    finally:
        store.close()


def _who() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # a container user without a passwd entry
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def _ago(at: float | None) -> str:
    return "-" if at is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))


def _echo(as_json: bool, doc: dict[str, Any], text: str) -> None:
    click.echo(json.dumps(doc, indent=2) if as_json else text)


@click.group(short_help="Pause, resume or release a table; show its job history.")
def table() -> None:
    """Per-table controls shared by every replica of the daemon and kept across restarts."""


@table.command(short_help="Stop planning and executing on a table (it is still polled).")
@click.argument("table_arg", metavar="TABLE")
@click.option("--reason", default="", help="Why (shown in status and history).")
@_config_option
@_json_option
def pause(table_arg: str, reason: str, config_file: str | None, as_json: bool) -> None:
    """Pause TABLE: every replica keeps polling it and plans and executes nothing on it."""
    settings = _settings(config_file)
    uri = resolve_table(settings, table_arg)
    p = Pause(_who(), time.time(), reason)
    with _store(settings) as store:
        store.pause(uri, p)
    _echo(as_json, {"table": uri, "pause": asdict(p)}, f"paused {uri}" + (f": {reason}" if reason else ""))


@table.command(short_help="Undo pause.")
@click.argument("table_arg", metavar="TABLE")
@_config_option
@_json_option
def resume(table_arg: str, config_file: str | None, as_json: bool) -> None:
    """Resume TABLE: the daemon plans and executes on it again."""
    settings = _settings(config_file)
    uri = resolve_table(settings, table_arg)
    with _store(settings) as store:
        was = store.resume(uri)
    _echo(as_json, {"table": uri, "was_paused": was}, f"resumed {uri}" if was else f"{uri} was not paused")


@table.command(short_help="Lift a table's quarantine.")
@click.argument("table_arg", metavar="TABLE")
@_config_option
@_json_option
def release(table_arg: str, config_file: str | None, as_json: bool) -> None:
    """Release TABLE from quarantine: every replica serves it again, with fresh retry counts."""
    settings = _settings(config_file)
    uri = resolve_table(settings, table_arg)
    with _store(settings) as store:
        lifted = store.release(uri)
    text = f"released {uri} (quarantined: {lifted.reason})" if lifted else f"{uri} was not quarantined"
    _echo(as_json, {"table": uri, "released": asdict(lifted) if lifted else None}, text)


@table.command(short_help="A table's last jobs, from every replica.")
@click.argument("table_arg", metavar="TABLE")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True, help="Jobs shown.")
@_config_option
@_json_option
def history(table_arg: str, limit: int, config_file: str | None, as_json: bool) -> None:
    """The last jobs of TABLE, newest first: when, kind, action, instant, outcome, seconds, replica."""
    settings = _settings(config_file)
    uri = resolve_table(settings, table_arg)
    with _store(settings) as store:
        records = store.history(uri, limit)
    if as_json:
        click.echo(json.dumps([asdict(r) for r in records], indent=2))
        return
    if not records:
        click.echo(f"{uri}: no jobs recorded")
        return
    click.echo(f"{'finished':<19} {'kind':<7} {'action':<14} {'instant':<17} {'outcome':<19} "
               f"{'seconds':>8} replica / message")
    for r in records:
        click.echo(f"{_ago(r.finished_at):<19} {r.kind:<7} {r.action:<14} {r.instant or '-':<17} "
                   f"{r.outcome:<19} {r.seconds:>8.1f} {r.replica}" + (f": {r.message}" if r.message else ""))


@table.command(short_help="Every paused or quarantined table.")
@_config_option
@_json_option
def show(config_file: str | None, as_json: bool) -> None:
    """List the tables that are paused or quarantined, with who, when and why."""
    settings = _settings(config_file)
    with _store(settings) as store:
        controls = store.read_all()
    uris = sorted(set(controls.pauses) | set(controls.quarantines))
    if as_json:
        doc = {u: {"pause": asdict(p) if (p := controls.pauses.get(u)) else None,
                   "quarantine": asdict(q) if (q := controls.quarantines.get(u)) else None} for u in uris}
        click.echo(json.dumps(doc, indent=2))
        return
    if not uris:
        click.echo(f"no table is paused or quarantined ({store.where})")
    for u in uris:
        click.echo(u)
        p, q = controls.pauses.get(u), controls.quarantines.get(u)
        if p is not None:
            click.echo(f"  paused by {p.by} at {_ago(p.at)}" + (f": {p.reason}" if p.reason else ""))
        if q is not None:
            click.echo(f"  quarantined by {q.replica} at {_ago(q.at)}: {q.reason}")
            click.echo(f"  retries {q.retries}, next at {_ago(q.next_retry_at)}"
                       + (f"; last: {q.last_retry_error}" if q.last_retry_error else ""))
