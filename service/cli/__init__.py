"""The ``hoodied`` command line."""
