"""Options and small helpers the ``hoodied`` commands share.

``lock_options`` adds the table-lock options of every command that writes the timeline:
``--lock auto`` (the default: ``local`` for a local table, ``storage`` for a table on an object store),
``--lock local`` (a file lock under ``.hoodie/.locks``, one host), ``--lock storage`` (Apache Hudi's
``StorageBasedLockProvider`` lock file) or ``--lock redis://HOST:PORT/DB``.
Apache Hudi writers running beside hoodied must use the same lock for plans and completions to be
serialized with theirs. ``parse_key_values`` reads repeatable ``KEY=VALUE`` options;
``terminal_progress`` draws a job's progress on standard error (``service.cli.terminal``).
``json_option`` and ``echo_json`` are every command's ``--json`` (one document on standard output);
``detailed_exit_code_option`` and ``finish`` its opt-in "nothing due" exit code (``service.cli.exits``).
``INSTANT_TIME`` is the type of every option that takes an instant time: anything else is a usage error
(exit 2) before the table is opened, never a format error of the table.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterable
from typing import Any

import click

from hoodied.hoodie.timeline.instant import is_instant_time
from hoodied.service.cli.exits import EXIT_NOTHING_DUE
from hoodied.service.cli.terminal import interactive, progress_bar
from hoodied.service.spark_jobs import Progress

__all__ = [
    "INSTANT_TIME",
    "InstantTimeType",
    "detailed_exit_code_option",
    "echo_json",
    "finish",
    "json_option",
    "lock_options",
    "parse_key_values",
    "progress_bar",
    "terminal_progress",
]


class InstantTimeType(click.ParamType):
    """An instant time given on the command line: 17 digits (yyyyMMddHHmmssSSS), or 14 on older tables."""

    name = "instant"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        if not is_instant_time(text):
            self.fail(f"{text!r} is not an instant time (17 digits, yyyyMMddHHmmssSSS)", param, ctx)
        return text


INSTANT_TIME = InstantTimeType()


def lock_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--lock``, ``--lock-wait-ms``, ``--lock-retries``, ``--clock-skew-ms`` for timeline writers."""
    options = [
        click.option(
            "--lock",
            "lock_option",
            default="auto",
            show_default=True,
            help="Table lock: 'auto' ('local' for a table on a local file system, 'storage' on an object "
            "store), 'local' (file lock in .hoodie/.locks, one host), 'storage' (Apache Hudi's "
            "StorageBasedLockProvider lock file .hoodie/.locks/table_lock.json), 'filesystem' (Apache "
            "Hudi's FileSystemBasedLockProvider lock files .hoodie/lock and .hoodie/.aux/lock; "
            "'filesystem?expire_minutes=N&path=DIR' as its expire and path keys), "
            "zookeeper://HOST:PORT/BASE_PATH?lock_key=KEY (Apache Hudi's ZookeeperBasedLockProvider; "
            "lock_key defaults to the table name), "
            "dynamodb://TABLE?region=REGION&partition_key=KEY&endpoint_url=URL (Apache Hudi's "
            "DynamoDBBasedLockProvider; partition_key defaults to the table name) or redis://HOST:PORT/DB.",
        ),
        click.option(
            "--lock-wait-ms",
            default=60_000,
            show_default=True,
            type=click.IntRange(min=0),
            help="How long one attempt waits for the lock.",
        ),
        click.option(
            "--lock-retries",
            default=3,
            show_default=True,
            type=click.IntRange(min=0),
            help="Further attempts when the lock is busy or the lock service is unreachable.",
        ),
        click.option(
            "--clock-skew-ms",
            default=200,
            show_default=True,
            type=click.IntRange(min=0),
            help="hoodie.time.generator.max_expected_clock_skew_ms of the table's writers.",
        ),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def parse_key_values(values: Iterable[str], what: str) -> dict[str, str]:
    """``["k=v", ...]`` -> dict; a value without ``=`` is a usage error naming ``what``."""
    out: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{item!r}: expected KEY=VALUE", param_hint=what)
        out[key.strip()] = value.strip()
    return out


def terminal_progress(label: str) -> contextlib.AbstractContextManager[Progress | None]:
    """``SparkRunner``'s progress: a bar when standard error is a terminal (``terminal.progress_bar``)."""
    return progress_bar(label, interactive())


def json_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--json``: the result as one JSON document on standard output (no bar, no spinner)."""
    return click.option("--json", "as_json", is_flag=True,
                        help="Print the result as one JSON document on standard output.")(fn)


def detailed_exit_code_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--detailed-exit-code``: exit ``EXIT_NOTHING_DUE`` (7) when the command found nothing to do."""
    return click.option(
        "--detailed-exit-code", is_flag=True,
        help=f"Exit {EXIT_NOTHING_DUE} instead of 0 when there was nothing to do (nothing written).",
    )(fn)


def echo_json(value: Any) -> None:
    """``value`` as one indented JSON document on standard output."""
    click.echo(json.dumps(value, indent=2, default=str))


def finish(nothing_due: bool, detailed_exit_code: bool) -> None:
    """End a command that may have found nothing to do: ``EXIT_NOTHING_DUE`` when asked for."""
    if nothing_due and detailed_exit_code:
        sys.exit(EXIT_NOTHING_DUE)
