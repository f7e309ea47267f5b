"""nkicc's command line as a user runs it: a child process `python -m nkicc ARGS`,
its output captured as text."""
import os
import subprocess
import sys

from tests.support.events import FAILURE_BOUND_S


def run_cli(*args, cwd=None, env: dict | None = None, add_env: dict | None = None, module: str = "nkicc",
            timeout: float = FAILURE_BOUND_S) -> subprocess.CompletedProcess:
    """`python -m MODULE ARGS` in `cwd`. env: the child's whole environment (None: this
    process's); add_env: variables set on top of it. `timeout` only turns a hang into a failure."""
    if add_env:
        env = {**(os.environ if env is None else env), **add_env}
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=timeout)
