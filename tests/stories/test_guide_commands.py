"""The user guide's commands work when pasted into a fresh folder (issue 7).

docs/guide.md and README.md are parsed for fenced blocks:

- a ```python block whose first line is `# NAME.py` is a file the reader is
  told to create: it is written into the test's tmp folder;
- an unnamed ```python block is a snippet the reader runs as it is: it runs as a
  script of its own;
- every line of a ```bash block is a command (trailing `# comments` stripped;
  `cmd1 && cmd2` chains split, see SKIP). Each runs with bash in a tmp folder
  holding the named files, against the nkicc installed next to sys.executable
  (the CI environment is a fresh venv with `pip install '.[test]'`), with the
  session's compile cache from conftest.

A command is RUN by default: a new command in the guide is tested as soon as it
is written, and a broken one fails here (fix the guide, which is what users
paste). Only the patterns in SKIP are left out, each with its reason. Paths that
name repository folders (`examples/...`, `tests/...`) are resolved against the
repository; `../shared/...` against the repository's parent, and a command that
needs `../shared/workloads` is skipped when that folder is absent.

Every command must exit 0, unless its comment says otherwise (`# exits 1`);
where the guide says what a command prints, EXPECT checks a key fragment.
"""
import os
import re
import subprocess
import sys
import shutil
from dataclasses import dataclass, field

import pytest

from tests.support.paths import REPO, WORKLOADS, needs_workloads

DOCS = [REPO / "docs" / "guide.md", REPO / "README.md"]

# Parts of a command (one `&&` segment) that are not run, and why. A line whose
# every segment is skipped is reported as a skipped test case with these reasons.
SKIP = [
    (r"^(python3?|pip3?)\b.*\bpip3? install\b|^pip3? install\b",
     "installs into the environment; the test runs the nkicc already installed "
     "(CI: a fresh venv with pip install '.[test]', which includes matplotlib for the timeline picture)"),
    (r"^python3? -m venv\b", "creates a virtual environment; the test runs in the current one"),
    (r"^(\.|source) \S*bin/activate$", "activates the venv the skipped `python3 -m venv` creates"),
    (r"^python3? -m pytest\b", "runs the whole test suite, this file included"),
    (r"^python3? bench/(run_all|testbench)\.py\b", "a benchmark run: minutes (run_all --quick) to an hour "
     "(the full-size testbench); bench/ scripts are checked by tests/bench/test_run_all.py"),
]

# Commands that mutate the compile cache run against a private cache folder, so
# that they never empty the session cache the rest of the test suite shares;
# this command fills it first, so that there is something to clear.
PRIVATE_CACHE = re.compile(r"\bnkicc cache (clear|prune)\b")
PRIVATE_CACHE_SEED = "nkicc compile add.py::add"


# -- extraction ---------------------------------------------------------------

FENCE = re.compile(r"^```([\w+-]*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
FILE_HEADER = re.compile(r"#\s*([\w./-]+\.py)\s*$")
EXIT_COMMENT = re.compile(r"\bexits?\s+(?:with\s+)?(?:code\s+)?(\d+)\b")


def split_comment(line: str) -> tuple[str, str]:
    """`cmd args  # comment` -> ("cmd args", "comment"); a # inside quotes or a word stays."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1:].strip()
    return line.rstrip(), ""


@dataclass
class Command:
    doc: str
    line: int
    text: str                 # the line as pasted, comment stripped
    comment: str
    run: str = ""             # what is run: the segments not skipped, joined with &&
    skipped: list = field(default_factory=list)   # (segment, reason)

    @property
    def id(self) -> str:
        shown = self.run or self.text
        return f"{self.doc}:{self.line} {shown}".replace("::", ":")


@dataclass
class Snippet:
    doc: str
    line: int
    source: str

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line} python snippet"


def extract():
    files, commands, snippets = {}, [], []
    for path in DOCS:
        text = path.read_text()
        doc = path.relative_to(REPO).as_posix()
        for m in FENCE.finditer(text):
            lang, body = m.group(1).lower(), m.group(2)
            first = text.count("\n", 0, m.start(2)) + 1       # line number of the block's first line
            if lang == "python":
                head = FILE_HEADER.fullmatch(body.split("\n", 1)[0].strip())
                if head:
                    name = head.group(1)
                    assert name not in files or files[name] == body, f"{doc}: two different files named {name}"
                    files[name] = body
                else:
                    snippets.append(Snippet(doc, first, body))
            elif lang in ("bash", "sh", "shell", "console"):
                pending, start = "", None
                for k, raw in enumerate(body.splitlines()):
                    if lang == "console":
                        if not raw.startswith("$ "):
                            continue                          # output lines
                        raw = raw[2:]
                    start = first + k if start is None else start
                    if raw.rstrip().endswith("\\"):         # continuation: one command
                        pending += raw.rstrip()[:-1] + " "
                        continue
                    cmd, comment = split_comment(pending + raw)
                    pending, line = "", start
                    start = None
                    if cmd.strip():
                        commands.append(Command(doc, line, cmd.strip(), comment))
    for c in commands:
        kept = []
        for seg in (s.strip() for s in c.text.split("&&")):
            reason = next((why for pat, why in SKIP if re.search(pat, seg)), None)
            if reason:
                c.skipped.append((seg, reason))
            else:
                kept.append(seg)
        c.run = " && ".join(kept)
    return files, commands, snippets


FILES, COMMANDS, SNIPPETS = extract()


# -- expected output ----------------------------------------------------------

def _summary_templates():
    """The lines of the guide's "What the compile summary says" block, as regexes
    with every number (and the kernel's name) left open."""
    guide = (REPO / "docs" / "guide.md").read_text()
    m = re.search(r"^## What the compile summary says\n+```\n(.*?)^```", guide, re.M | re.S)
    assert m, "docs/guide.md lost its compile summary example"
    out = []
    for line in m.group(1).strip().splitlines():
        line = re.sub(r"^kernel \S+:", "kernel \0:", line.strip())
        line = re.sub(r"\(\d+ attempts[^)]*\)", "\2", line)  # "(1 attempt)" has no explanation
        line = re.sub(r" as traced, [\d,]+ after the passes", "\3", line)  # said only where passes changed it
        pat = re.escape(re.sub(r"\d[\d,]*(?:\.\d+)?", "\1", line))
        pat = pat.replace("\0", r"\S+").replace("\1", r"\d[\d,]*(?:\.\d+)?")
        pat = pat.replace("\2", r"\(\d+ attempts?(?:: [^)]*)?\)")
        pat = pat.replace("\3", r"(?: as traced, \d[\d,]* after the passes)?$")
        out.append(pat)
    return m.group(1).strip().splitlines(), out


SUMMARY_LINES, SUMMARY_PATTERNS = _summary_templates()


def summary_format(r, env):
    for pat in SUMMARY_PATTERNS:
        assert re.search(pat, r.stdout, re.M), f"compile summary does not have the guide's line /{pat}/:\n{r.stdout}"


def prints_small_error(r, env):
    assert float(r.stdout.strip().splitlines()[-1]) < 1e-5, r.stdout


def prints_cache_dir(r, env):
    assert r.stdout.strip() == env["NKICC_CACHE_DIR"], r.stdout


def clears_entries(r, env):
    assert re.search(r"removed [1-9]\d* entries", r.stdout), r.stdout      # the seeded compile's entries


# Keyed by the command as the guide writes it (comment stripped). A value is a
# list of fragments that must appear in stdout+stderr, or a check(result, env).
EXPECT = {
    "python add.py": prints_small_error,
    "nkicc --help": ["compile", "simulate", "run", "passes", "explain", "reproduce", "cache"],
    "nkicc compile add.py::add": summary_format,
    "nkicc compile add.py::add --arg 'a=float32[1024,64]' --arg 'b=float32[1024,64]' --print-ir":
        ["a: float32[1024,64]", "static[0, 2)", ".mb3", "kernel add:"],  # 8 iterations, four buffers
    "nkicc simulate add.py::add --inputs random --seed 1": ["simulated add on trn2", "estimated time", "dve"],
    "nkicc passes": ["name", "default", "scope", "cost", "version", "provided by",
                     "licm", "dma-coalesce", "unroll", "global-schedule"],
    "nkicc compile add.py::add --time-passes": ["time (ms)", "mem (MB)", "IR in", "licm"],
    "nkicc compile add.py::add --print-ir-after licm": ["static[0, 4)", "tensor_tensor"],
    "nkicc cache path": prints_cache_dir,
    "nkicc cache stats": ["hits", "misses", "corrupt entries"],
    "nkicc cache clear": clears_entries,
    "nkicc compile add.py::add --no-cache": ["bypassed"],
    "nkicc compile examples/fused_matmul.py::mm2": ["kernel mm2:", "rolled"],
}


# -- running ------------------------------------------------------------------

REPO_DIRS = sorted(p.name for p in REPO.iterdir() if p.is_dir() and not p.name.startswith("."))


def resolve_paths(cmd: str) -> str:
    """`examples/x.py` -> REPO/examples/x.py, `../shared/...` -> REPO/../shared/...
    (only words that start with one of these folders, so guide files stay put)."""
    cmd = re.sub(r"(?<![\w./-])\.\./(?=shared/)", lambda m: str(REPO.parent) + "/", cmd)
    dirs = "|".join(re.escape(d) for d in REPO_DIRS if d not in {f.split("/")[0] for f in FILES})
    return re.sub(rf"(?<![\w./-])({dirs})(?=/)", lambda m: str(REPO / m.group(1)), cmd) if dirs else cmd


@pytest.fixture(scope="session")
def guide_env(tmp_path_factory):
    """A user's shell: the installed nkicc and this python first on PATH, and no
    nkicc settings from the environment the tests were started in."""
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    shim = tmp_path_factory.mktemp("guide-bin")
    bindir = os.path.dirname(sys.executable)
    # `python` is this interpreter, venv or not (a wrapper, not a symlink: a
    # symlinked venv python would not find its venv)
    wrappers = {"python": "", "python3": ""}
    if not os.path.exists(os.path.join(bindir, "nkicc")):
        # installed elsewhere (pip --user): the console script may not be next to
        # sys.executable; stand in for it with the same entry point
        wrappers["nkicc"] = "-m nkicc"
    for name, args in wrappers.items():
        (shim / name).write_text(f'#!/bin/sh\nexec "{sys.executable}" {args} "$@"\n')
        (shim / name).chmod(0o755)
    env = {k: v for k, v in os.environ.items()
           if k not in ("NKICC_CACHE", "NEURON_PLATFORM_TARGET_OVERRIDE", "PYTHONPATH")}
    env["PATH"] = os.pathsep.join([str(shim), bindir, env.get("PATH", "")])
    env["NKICC_CACHE_DIR"] = os.environ["NKICC_CACHE_DIR"]       # the session cache (conftest)
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    return env


def write_files(folder):
    for name, body in FILES.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(body)


def check(r, expect, env):
    if expect is None:
        return
    if callable(expect):
        expect(r, env)
        return
    out = r.stdout + r.stderr
    for fragment in expect:
        assert fragment in out, f"expected {fragment!r} in the output:\n{out}"


def _param(c: Command):
    marks = [needs_workloads] if "../shared/workloads" in c.run else []
    return pytest.param(c, id=c.id, marks=marks)


@pytest.mark.parametrize("cmd", [_param(c) for c in COMMANDS])
def test_guide_command(cmd, tmp_path, guide_env):
    if not cmd.run:
        pytest.skip("; ".join(f"`{seg}`: {why}" for seg, why in cmd.skipped))
    env = dict(guide_env)
    write_files(tmp_path)
    if PRIVATE_CACHE.search(cmd.run):
        env["NKICC_CACHE_DIR"] = str(tmp_path / "cache")
        seed = subprocess.run(["bash", "-c", PRIVATE_CACHE_SEED], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)
        assert seed.returncode == 0, seed.stderr
    want = EXIT_COMMENT.search(cmd.comment)
    code = int(want.group(1)) if want else 0
    # failglob: an unquoted `[`, `*` or `?` that matches no file is an error, as in
    # zsh (the macOS default shell), where `--arg a=float32[4,4]` would not run
    r = subprocess.run(["bash", "-O", "failglob", "-c", resolve_paths(cmd.run)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == code, (f"{cmd.doc}:{cmd.line}: `{cmd.run}` exited {r.returncode}, expected {code}\n"
                                  f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}")
    assert "Traceback (most recent call last)" not in r.stderr, r.stderr
    check(r, EXPECT.get(cmd.text), env)


@pytest.mark.parametrize("snippet", [pytest.param(s, id=s.id) for s in SNIPPETS])
def test_guide_python_snippet(snippet, tmp_path, guide_env):
    """An unnamed python block runs as pasted into a file of its own."""
    write_files(tmp_path)
    script = tmp_path / f"snippet_{snippet.line}.py"
    script.write_text(snippet.source)
    r = subprocess.run(["python", script.name], cwd=tmp_path, env=guide_env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"{snippet.doc}:{snippet.line}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"


# -- the extraction itself ----------------------------------------------------

def test_extraction_found_the_guide():
    """Guards the parser: a fence it no longer recognises would leave nothing to run."""
    assert "add.py" in FILES
    runnable = [c for c in COMMANDS if c.doc == "docs/guide.md" and c.run]
    assert len(runnable) >= 10, [c.text for c in COMMANDS]
    assert any(c.run == "nkicc compile examples/fused_matmul.py::mm2" for c in COMMANDS)   # README, after the install


def test_every_expectation_names_a_guide_command():
    """A command rewritten in the guide must not leave its output check behind unused."""
    texts = {c.text for c in COMMANDS} | {c.run for c in COMMANDS}
    assert not set(EXPECT) - texts, sorted(set(EXPECT) - texts)
