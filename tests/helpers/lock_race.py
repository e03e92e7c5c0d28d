"""Two real processes racing for one table lock, each holding it ``n`` times.

Each process runs ``python -c <lock_setup + the race loop> *args log start n``: ``lock_setup``
builds the lock as ``lock`` from its own ``args`` (``sys.argv[1:-3]``); the loop waits for the
file ``start``, then ``n`` times takes the lock and appends ``enter <pid> <token>`` and ``exit <pid>
<token>`` lines to ``log`` (opened with ``O_APPEND``, so lines of both processes interleave in the
order they happened). ``race`` starts both, lets them go at once and checks that no holding
overlapped another; it returns the fencing tokens in holding order.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["race"]

_LOOP = """
import os, sys, time
log, start, n = sys.argv[-3:]
fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
while not os.path.exists(start):
    time.sleep(0.005)
for _ in range(int(n)):
    token = lock.acquire()
    os.write(fd, f"enter {os.getpid()} {token}\\n".encode())
    time.sleep(0.003)
    lock.ensure_held()
    os.write(fd, f"exit {os.getpid()} {token}\\n".encode())
    lock.release()
"""


def race(lock_setup: str, args: list[str], tmp_path: Path, n: int, *, timeout: float) -> list[int]:
    """Run the race (see the module docstring); the tokens, each holder's enter followed by its exit."""
    log, start = tmp_path / "holdings.log", tmp_path / "start"
    procs = [
        subprocess.Popen([sys.executable, "-c", lock_setup + _LOOP, *args, str(log), str(start), str(n)],
                         cwd=tmp_path, env=dict(os.environ), stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    time.sleep(1.0)  # both imported and waiting
    start.touch()
    for p in procs:
        _, err = p.communicate(timeout=timeout)
        assert p.returncode == 0, err
    lines = [line.split() for line in log.read_text().splitlines()]
    assert len(lines) == 2 * 2 * n
    tokens = []
    for enter, leave in zip(lines[0::2], lines[1::2], strict=True):
        # every enter is followed by the same holder's exit: no holding overlapped another
        assert enter[0] == "enter" and leave[0] == "exit" and enter[1:] == leave[1:], (enter, leave)
        tokens.append(int(enter[2]))
    assert {line[1] for line in lines} == {str(p.pid) for p in procs}
    return tokens
