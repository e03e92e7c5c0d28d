"""``python -m hoodied.service.cli``: the same as the ``hoodied`` command."""

from hoodied.service.cli.main import main

main()
