"""The exit codes of every ``hoodied`` command, and the table of them ``hoodied --help`` shows.

Codes 0-6 keep their meaning from release to release; a new outcome gets the next free number.
``EXIT_NOTHING_DUE`` is opt-in (``--detailed-exit-code`` on ``schedule``, ``execute``, ``rollback``
and ``archive``), as ``terraform plan -detailed-exitcode`` and ``git diff --exit-code`` do: a
script that runs ``hoodied schedule clean T && hoodied execute T`` keeps working, a scheduler task
that wants to tell "nothing to do" from "done" asks for it. ``EXIT_UNSERVED`` is what
``hoodied run --once`` returns when some table could not be served at all.
"""

from __future__ import annotations

__all__ = [
    "EPILOG",
    "EXIT_CONFIG",
    "EXIT_CORRUPT",
    "EXIT_ERROR",
    "EXIT_NOTHING_DUE",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_STORAGE",
    "EXIT_UNSERVED",
    "EXIT_UNSUPPORTED",
    "EXIT_USAGE",
]

EXIT_OK = 0
EXIT_ERROR = 1
"""Any other error; for ``run --once``: a job failed (or a table was quarantined for it), or the
clock held work back."""
EXIT_USAGE = 2
EXIT_CONFIG = EXIT_USAGE
"""Invalid daemon settings: a usage error of ``run``, ``status`` and ``config check``."""
EXIT_NOT_FOUND = 3
EXIT_CORRUPT = 4
EXIT_UNSUPPORTED = 5
EXIT_STORAGE = 6
EXIT_NOTHING_DUE = 7
"""With ``--detailed-exit-code``: the command found nothing to do (no plan due, no pending
instant it could run, nothing to roll back or archive); nothing was written."""
EXIT_UNSERVED = 8
"""``run --once``: the pass ended, but some table could not be served: a table that could not be
read (corrupt, unsupported, storage failing) or a discover root that is missing or cannot be listed.
The tables that could be read were served; this code wins over ``EXIT_ERROR``."""

EPILOG = """\b
Exit codes:
  0  success
  1  any other error; run --once: a job failed or the clock held work back
  2  bad usage (unknown option, missing argument, invalid settings)
  3  the table (or path) does not exist / is not a Hudi table
  4  a file of the table is corrupt or does not follow the Hudi format
  5  the table uses something hoodied does not support (version, format, payload)
  6  storage failure (permission denied, I/O error) or Spark engine unavailable
     (Spark Connect server unreachable or lost, local Spark not started in time)
  7  nothing due (only with --detailed-exit-code: schedule, execute, rollback,
     archive found nothing to do and wrote nothing)
  8  run --once: some tables could not be served (a table unreadable, a
     discover root missing or not listable); the others were served
"""
