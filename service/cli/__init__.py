"""The ``hoodied`` command line: the click group ``cli`` and the entry point ``main`` (``cli.main``).

``services`` holds ``execute`` and ``rollback``, ``schedule`` the ``schedule`` group, ``daemon`` the
daemon's commands, ``report`` what ``timeline``/``inspect``/``read`` show, ``options`` the shared
options. The commands call the use cases (``service.operations``) and import no pyspark.
"""

from hoodied.service.cli.main import cli, main

__all__ = ["cli", "main"]
