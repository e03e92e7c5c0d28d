"""Options and small helpers the ``hoodied`` commands share.

``lock_options`` adds the table-lock options of every command that writes the timeline:
``--lock auto`` (the default: ``local`` for a local table, ``storage`` for a table on an object store),
``--lock local`` (a file lock under ``.hoodie/.locks``, one host), ``--lock storage`` (Apache Hudi's
``StorageBasedLockProvider`` lock file) or ``--lock redis://HOST:PORT/DB``.
Apache Hudi writers running beside hoodied must use the same lock for plans and completions to be
serialized with theirs. ``parse_key_values`` reads repeatable ``KEY=VALUE`` options;
``progress_bar`` / ``terminal_progress`` draw a job's progress on standard error.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import click

from hoodied.service.spark_jobs import Progress

__all__ = ["lock_options", "parse_key_values", "progress_bar", "terminal_progress"]


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


@contextlib.contextmanager
def progress_bar(label: str, enabled: bool) -> Iterator[Progress | None]:
    """A stderr progress bar of operations done / total (``hoodied read``'s style), or nothing."""
    if not enabled:
        yield None
        return
    with click.progressbar(length=1, label=label, file=sys.stderr, show_pos=True) as bar:

        def update(done: int, total: int) -> None:
            bar.length = max(total, 1)
            bar.update(done - bar.pos)

        yield update


def terminal_progress(label: str) -> contextlib.AbstractContextManager[Progress | None]:
    """``SparkRunner``'s progress: a bar when standard error is a terminal."""
    return progress_bar(label, sys.stderr.isatty())
