"""``python -m backend.cli``: see :mod:`backend.cli`.

A SIGTERM that arrives while the interpreter and the command's modules load ends it with exit
status 130 and a line saying so; once they are loaded, SIGTERM is the command's again (its own
handler, or the default)."""

import signal
import sys


def _stopped_while_starting(signum, frame):  # noqa: ARG001
    sys.stderr.write("stopped (SIGTERM) while starting\n")
    raise SystemExit(130)


signal.signal(signal.SIGTERM, _stopped_while_starting)

from backend.cli import main  # noqa: E402  (after the handler: the imports are what takes time)

sys.exit(main(loaded=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL)))
