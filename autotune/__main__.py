"""``python -m autotune`` (what ``torchrun -m autotune train ...`` runs, and so each rank
of a multi-process ``autotune train``).

A rank started by autotune's launcher (``autotune.engine.launcher``: ``AUTOTUNE_LAUNCHER_PID``
is set) takes Ctrl-C, which the launcher passes on, as it takes SIGTERM: it ends at once
and without a word until the trainer's own handlers stop it cleanly after a step (the
launcher says "interrupted"). Raised as ``KeyboardInterrupt`` in the start-up instead,
it printed a traceback from the imports on every rank, or broke numpy's import half way
("cannot load module more than once"), or waited in ``init_process_group`` (a C++ wait,
where Python runs no handler) for a rank already gone, until the launcher's 300 s.

Elsewhere, a Ctrl-C in the second or two of the imports, before the command's own
handling, ends with "interrupted" and 130 as it does later, not a traceback.
"""

import os
import signal
import sys

from autotune.core.signals import how_stopped
from autotune.engine.launcher import PID_VAR

if os.environ.get(PID_VAR) and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # one ignored at the start stays ignored

try:
    from autotune.cli.main import main
except KeyboardInterrupt as stop:
    code, said = how_stopped(stop)
    print(said, file=sys.stderr)
    sys.exit(code)

if __name__ == "__main__":
    main()
