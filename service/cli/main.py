"""The ``hoodied`` command line: the click group, its commands and the entry point ``main``.

The group adds its commands here, in one place: ``timeline``, ``inspect``, ``read``, ``demo``
(below), ``execute`` and ``rollback`` (``service.cli.services``), ``schedule``
(``service.cli.schedule``), ``run``, ``status`` and ``config`` (``service.cli.daemon``), ``table``
(``service.cli.table``). No command module imports pyspark: a Spark session starts only in a
command that runs a Spark job.

Every command maps the project's typed errors to one line on standard error and an exit
code scripts can test; ``--debug`` adds the traceback. The line ends with where the error's cause and
fix are written: its class's entry of the troubleshooting page (``see: ...troubleshooting.md#<class>``;
``tests/docs`` checks that every error class has one). Results go to standard output
(``--json`` where a script wants to parse them), logs to standard error.
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any, NoReturn

import click

from hoodied.hoodie.errors import (
    EngineUnavailableError,
    HoodieFormatError,
    HoodieServiceError,
    StorageError,
    TableNotFoundError,
    UnsupportedTableError,
)
from hoodied.hoodie.secrets import mask_secrets
from hoodied.service.cli.archive import archive
from hoodied.service.cli.daemon import config, run, status
from hoodied.service.cli.exits import (
    EPILOG,
    EXIT_CONFIG,
    EXIT_CORRUPT,
    EXIT_ERROR,
    EXIT_NOT_FOUND,
    EXIT_NOTHING_DUE,
    EXIT_OK,
    EXIT_STORAGE,
    EXIT_UNSERVED,
    EXIT_UNSUPPORTED,
    EXIT_USAGE,
)
from hoodied.service.cli.options import INSTANT_TIME, echo_json, json_option, lock_options
from hoodied.service.cli.schedule import schedule
from hoodied.service.cli.services import execute, rollback, unschedule
from hoodied.service.cli.table import table
from hoodied.service.cli.terminal import interactive
from hoodied.service.config import ConfigError
from hoodied.service.logs import configure_logging

__all__ = [
    "EXIT_CORRUPT", "EXIT_ERROR", "EXIT_NOTHING_DUE", "EXIT_NOT_FOUND", "EXIT_OK", "EXIT_STORAGE",
    "EXIT_UNSERVED", "EXIT_UNSUPPORTED", "EXIT_USAGE", "cli", "main",
]

_EXIT_BY_ERROR: list[tuple[type[HoodieServiceError], int]] = [
    (TableNotFoundError, EXIT_NOT_FOUND),
    (HoodieFormatError, EXIT_CORRUPT),
    (UnsupportedTableError, EXIT_UNSUPPORTED),
    (StorageError, EXIT_STORAGE),
    # an outage like the storage's: the table is not at fault, the same command works once it is back
    (EngineUnavailableError, EXIT_STORAGE),
    # a settings file (or a file named beside it) that cannot be used: a usage error, as a bad option
    (ConfigError, EXIT_CONFIG),
]

#: The troubleshooting page of the documentation: one entry per error class, its anchor the class's name.
TROUBLESHOOTING_URL = "https://github.com/hoodied/hoodied/blob/main/docs/troubleshooting.md"


def _fail(exc: BaseException, debug: bool) -> NoReturn:
    if debug:  # masked as every message: a URL with its password may sit in any error's text
        text = "".join(traceback.format_exception(exc))
        sys.stderr.write(mask_secrets(text))
    code = EXIT_ERROR
    for kind, kind_code in _EXIT_BY_ERROR:
        if isinstance(exc, kind):
            code = kind_code
            break
    message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    see = f" (see: {TROUBLESHOOTING_URL}#{type(exc).__name__.lower()})"
    click.echo(f"hoodied: error: {mask_secrets(message)}{see}", err=True)
    sys.exit(code)


class _Group(click.Group):
    """Maps hoodied errors raised by any command to one-line messages and exit codes."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except HoodieServiceError as exc:
            _fail(exc, bool(ctx.obj and ctx.obj.get("debug")))
        except OSError as exc:
            _fail(
                StorageError(f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": ")),
                bool(ctx.obj and ctx.obj.get("debug")),
            )


@click.group(cls=_Group, epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Print tracebacks and debug logs.")
@click.option(
    "--log-format",
    type=click.Choice(["console", "json"]),
    default=None,
    help="How log lines on standard error look. Default: console, except `run`, which takes its "
    "settings' log.format (json unless set; console for `run --demo`).",
)
@click.version_option(package_name="hoodied")
@click.pass_context
def cli(ctx: click.Context, debug: bool, log_format: str | None) -> None:
    """hoodied runs the table services of Apache Hudi tables.

    TABLE arguments are a Hudi table (table versions 6, 8, 9) at a local path, a file:// URI or
    an object-store URI (s3://, s3a://, gs://, az://, abfs://, abfss://), with credentials from
    the standard environment (AWS_*, GOOGLE_*, AZURE_*); Spark tasks read them from their own.
    """
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
    configure_logging(log_format or "console", "DEBUG" if debug else "INFO")  # type: ignore[arg-type]


def _output_option(ctx: click.Context, param: click.Parameter, value: str) -> str:
    folder = os.path.dirname(os.path.abspath(value))
    if not os.path.isdir(folder):
        raise click.BadParameter(f"folder {folder} does not exist")
    return value


def _open(table: str, *, include_history: bool = False) -> Any:
    # the read side (and report's pyarrow.parquet) loads only for the commands that read a table
    from hoodied.hoodie.table import HoodieTable

    return HoodieTable.open(table, include_history=include_history)


@cli.command(short_help="List the instants of a table, with plans of pending services.")
@click.argument("table")
@json_option
@click.option("--history", is_flag=True,
              help="Also list the archived completed instants (the LSM history; .hoodie/archived on "
                   "table version 6), marked archived.")
def timeline(table: str, as_json: bool, history: bool) -> None:
    """List every instant of TABLE: requested and completion time, action, state and,
    for pending table services, a summary of the plan."""
    from hoodied.service.cli.report import timeline_rows

    rows = timeline_rows(_open(table, include_history=history))
    if as_json:
        echo_json(rows)
        return
    click.echo(f"{'requested':<18} {'completed':<18} {'action':<14} {'state':<10} plan")
    for r in rows:
        note = r.get("plan") or ("archived" if r["archived"] else "")
        if r.get("corrupt_plan"):
            note = f"corrupt plan: {r['corrupt_plan']}"
        click.echo(
            f"{r['requested_time']:<18} {r['completion_time'] or '-':<18} {r['action']:<14} "
            f"{r['state']:<10} {note}".rstrip()
        )


def _lock_option(fn: Any) -> Any:
    """The ``--lock`` option of the timeline writers (``lock_options``), alone: the same values and
    default; its wait, retry and clock-skew companions mean nothing to a command that only looks."""
    probe = lock_options(lambda: None)
    (option,) = [p for p in getattr(probe, "__click_params__", []) if p.name == "lock_option"]
    if not hasattr(fn, "__click_params__"):
        fn.__click_params__ = []
    fn.__click_params__.append(option)
    return fn


@cli.command(short_help="Describe a table: config, files, pending services, metadata table, lock.")
@click.argument("table")
@json_option
@_lock_option
def inspect(table: str, as_json: bool, lock_option: str) -> None:
    """Describe TABLE: configuration, partitions, file groups, file slices and log files,
    pending table services, metadata-table partitions and listing drift (MDT vs storage), and
    the table lock --lock names: where it lives and who holds it now (read without taking it),
    plus Apache Hudi lock files on the table that this lock does not take."""
    from hoodied.service.cli.report import inspect_table, lock_report, render_inspect

    hoodie_table = _open(table)
    report = inspect_table(hoodie_table)
    try:
        report["lock"] = lock_report(hoodie_table, lock_option)
    except ValueError as exc:  # a --lock value of the wrong form
        raise click.BadParameter(str(exc).removeprefix("--lock "), param_hint="--lock") from None
    if as_json:
        echo_json(report)
    else:
        click.echo(render_inspect(report))


@cli.command(short_help="Export a table's snapshot (or an older one) to a parquet file.")
@click.argument("table")
@click.option(
    "--output",
    "-o",
    required=True,
    callback=_output_option,
    type=click.Path(dir_okay=False),
    help="Parquet file to write (replaced atomically when the read succeeds).",
)
@click.option(
    "--as-of",
    "as_of",
    default=None,
    type=INSTANT_TIME,
    help="Time travel: the snapshot as of this instant time (yyyyMMddHHmmssSSS).",
)
@click.option("--read-optimized", is_flag=True, help="Base files only (log files ignored).")
@click.option(
    "--listing",
    type=click.Choice(["auto", "storage", "metadata"]),
    default="auto",
    show_default=True,
    help="Where the file listing comes from: the metadata table when the table has one (auto), "
    "always storage, or always the metadata table.",
)
@click.option(
    "--skip-corrupt-blocks",
    is_flag=True,
    help="Skip corrupt log blocks as Apache Hudi's reader does, instead of failing.",
)
@json_option
def read(
    table: str, output: str, as_of: str | None, read_optimized: bool, listing: str, skip_corrupt_blocks: bool,
    as_json: bool,
) -> None:
    """Write the snapshot of TABLE (with the Hudi meta columns) to a parquet file."""
    from hoodied.service.cli.report import write_snapshot

    summary = write_snapshot(
        _open(table),
        output,
        as_of=as_of,
        read_optimized=read_optimized,
        listing=listing,  # type: ignore[arg-type]
        skip_corrupt_blocks=skip_corrupt_blocks,
        progress=interactive(as_json),
    )
    if as_json:
        echo_json({"output": output, "rows": summary["rows"], "file_slices": summary["file_slices"],
                   "as_of": as_of, "read_optimized": read_optimized})
        return
    click.echo(f"wrote {summary['rows']} rows from {summary['file_slices']} file slices to {output}")


@cli.command(short_help="Create a small demo Hudi table to try the other commands on.")
@click.argument("path", type=click.Path(file_okay=False))
@json_option
def demo(path: str, as_json: bool) -> None:
    """Create a small real Hudi table at PATH (merge-on-read, table version 9, with updates
    and deletes in log files) to try the other commands on. PATH is a new or empty local folder
    or an object-store prefix (s3://bucket/t ...) that holds no table yet."""
    from hoodied.hoodie.demo.demo_table import create_demo_table

    summary = create_demo_table(path)
    if as_json:
        echo_json(summary)
        return
    click.echo(
        f"created {summary['table_type']} table (version {summary['table_version']}) at {summary['path']}: "
        f"{len(summary['partitions'])} partitions, {len(summary['instants'])} delta commits, "
        f"{summary['rows']} rows in {summary['base_files']} base files and {summary['log_files']} log files"
    )


for _command in (execute, rollback, unschedule, schedule, archive, run, status, config, table):
    cli.add_command(_command)


def main(argv: list[str] | None = None) -> None:
    cli.main(args=argv, prog_name="hoodied")


if __name__ == "__main__":
    main()
