"""Named crash points: where a test can stop a writer to kill it with SIGKILL.

Every write path that has to survive a crash marks its steps with ``crash_point("name")``.
Nothing happens unless the process environment asks for that point:

- ``HOODIED_TEST_PAUSE_AT``: the point to stop at;
- ``HOODIED_TEST_PAUSE_READY``: a file written (``"<pid> <point>"``) when the point is reached,
  so the test knows the process is there;
- ``HOODIED_TEST_PAUSE_S``: how long to sleep there (default 60 s; the test kills it first);
- ``HOODIED_TEST_PAUSE_UNTIL``: a file; when set, the process waits there until that file exists
  and then goes on (the paused-executor tests stop it with SIGSTOP meanwhile, let another
  executor take the instant over, then let it resume).

The environment is read at each call, so Spark tasks (other processes) obey it too.
"""

from __future__ import annotations

import logging
import os
import time

log = logging.getLogger(__name__)

__all__ = ["PAUSE_ENV", "READY_ENV", "RESUME_ENV", "SLEEP_ENV", "crash_point"]

PAUSE_ENV = "HOODIED_TEST_PAUSE_AT"
READY_ENV = "HOODIED_TEST_PAUSE_READY"
SLEEP_ENV = "HOODIED_TEST_PAUSE_S"
RESUME_ENV = "HOODIED_TEST_PAUSE_UNTIL"


def crash_point(point: str) -> None:
    """Stop here (write the ready file, sleep) when the environment names ``point``; else nothing."""
    if os.environ.get(PAUSE_ENV) != point:
        return
    log.warning("test hook: pausing at %s", point)
    ready = os.environ.get(READY_ENV)
    if ready:
        with open(ready, "w", encoding="ascii") as f:
            f.write(f"{os.getpid()} {point}\n")
    resume = os.environ.get(RESUME_ENV)
    if resume:
        while not os.path.exists(resume):
            time.sleep(0.05)
        return
    time.sleep(float(os.environ.get(SLEEP_ENV, "60")))
