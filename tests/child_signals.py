"""Start a test's child process with the stop signals as an interactive shell leaves them.

POSIX has a shell without job control start a background command (``cmd &`` in a script)
with SIGINT and SIGQUIT ignored, and an ignored signal stays ignored through fork and
exec. CI's test runner is such a command, so every process a test starts inherited SIGINT
ignored, and honours it: a kill test's Ctrl-C then reached a run that had been told by its
parent to ignore it. A signal mask is inherited the same way. A test that sends a run a
stop signal starts it with ``preexec_fn=interactive`` so that the run sees what a
terminal's Ctrl-C would reach.
"""

from __future__ import annotations

import signal

__all__ = ["interactive"]

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def interactive() -> None:
    """In the child, before exec: the stop signals back to their default action, unblocked."""
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
