"""Can this argv start at all?  Checked before a run is recorded STARTING.

The wrapper execs ``argv`` in ``cwd`` with the supervisor's environment plus
the spec's ``env``; these checks find the program the way that exec does:
``argv[0]`` with a ``/`` is a path (relative ones are taken from ``cwd``),
any other name is looked up on the ``PATH`` of that environment.
"""

from __future__ import annotations

import os
from typing import Mapping, Sequence


def launch_problem(argv: Sequence[str], cwd: str, env: Mapping[str, str] | None = None) -> str | None:
    """Why ``argv`` cannot be started in ``cwd`` (a sentence), or None when it can."""
    if not os.path.exists(cwd):
        return f"its working folder (cwd) {cwd} does not exist"
    if not os.path.isdir(cwd):
        return f"its working folder (cwd) {cwd} is not a folder"
    if not argv or not argv[0]:
        return "the program (argv[0]) is empty"
    prog = argv[0]
    if "/" in prog:
        path = os.path.join(cwd, prog)  # an absolute prog stays as it is
        where = "" if os.path.isabs(prog) else f" (taken from the working folder {cwd})"
        if not os.path.exists(path):
            return f"the program (argv[0]) {path} does not exist{where}"
        if os.path.isdir(path):
            return f"the program (argv[0]) {path} is a folder{where}"
        if not os.access(path, os.X_OK):
            return f"the program (argv[0]) {path} is not executable{where}"
        return None
    full_env = dict(os.environ)
    full_env.update(env or {})
    dirs = os.get_exec_path(full_env)
    for d in dirs:
        candidate = os.path.join(cwd, d or ".", prog)  # relative PATH entries count from cwd, as in exec
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return None
    return f"the program (argv[0]) {prog!r} was not found on PATH ({os.pathsep.join(dirs) or 'empty'})"
