"""``python -m autotune`` (what ``torchrun -m autotune train ...`` runs, and so each rank
of a multi-process ``autotune train``).

A Ctrl-C in the second or two of the imports, before the command's own handling, ends
with "interrupted" and 130 as it does later, not a traceback: the launcher passes the
SIGINT on to the ranks, and each printed its ``KeyboardInterrupt`` from the imports.
"""

import sys

try:
    from autotune.cli.main import main
except KeyboardInterrupt:
    print("interrupted", file=sys.stderr)
    sys.exit(130)

if __name__ == "__main__":
    main()
