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


def run_in_process(capsys, *argv) -> tuple[int, str, str]:
    """`nkicc ARGV...` through the console script's entry point, in this process (no start-up
    cost): (exit code, stdout, stderr)."""
    from nkicc.cli import main  # imported when a test runs the CLI, not when tests are collected
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = ["nkicc", *argv]
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    out, err = capsys.readouterr()
    return code, out, err
