"""The ``autotune`` command line: one module per command group, composed in ``main``."""
