"""`bench/conformance.py --suite LIBRARY_DIR`: the NKI Library's own test suite on nkicc.

    python bench/conformance.py --suite LIBRARY_DIR [--first N] [--timeout S] [--all]
                                [--workers N | --cluster tcp://HOST:PORT] [--compare OLD.json]

Runs `pytest --nkicc test/integration --test-mode simulation` (the supported
command, nkicc.pytest_plugin) in LIBRARY_DIR, one pytest process per chunk of
items (a test file, or its first N items with --first), each with a per-item
timeout (pytest-timeout) and a memory cap. Chunks run one after another, or on a
Dask cluster with --workers/--cluster (nkicc.cluster, as `nkicc tune` does).
Writes the per-item results as JSON (--json) and the section "The library's
own test suite" of docs/conformance.md (--out): per family and test function,
passed / failed (the first error) / skipped by the suite (its reason) /
seconds, with nkicc's own seconds (trace, compile, simulate: timed inside the
process by the plugin) apart from the rest (the goldens, the harness).
`--compare OLD.json` names every item that passed there and does not now.
`--all` sets NKILIB_SIMULATION_RUN_ALL=1 (the large shapes the suite skips by default).
"""
from __future__ import annotations

import collections
import concurrent.futures
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BEGIN, END = "<!-- suite:begin -->", "<!-- suite:end -->"
TESTS = "test/integration"


@dataclass
class Item:
    nodeid: str
    status: str = "not run"  # passed | failed | skipped | timeout | not run
    message: str = ""         # the first error, or the suite's skip reason (one line)
    seconds: float = 0.0
    nkicc_s: float = 0.0      # nkicc's trace + compile + simulate
    calls: int = 0
    rss_peak_mb: float = 0.0  # the item's peak resident set (the process's, while the item ran)
    rss_start_mb: float = 0.0
    nkicc_added_mb: float = 0.0  # the most one nkicc call added to what the process held when it began
    out_of_memory_in: str = ""   # for an item that ran out of memory: "suite", or "nkicc: " and where in nkicc
    commit: str = ""             # nkicc's commit that ran it (a resumed run may span several)
    mem_gb: float = 0.0          # the memory cap it ran under (a rerun after running out has a larger one)


@dataclass
class Chunk:
    """Items of one test file, run by one pytest process."""
    library: str
    nodeids: list
    timeout: float
    mem_gb: float
    run_all: bool
    journal: str = ""  # each finished chunk's items are appended here (JSON lines): a stopped run keeps them
    commit: str = ""   # nkicc's commit, recorded on each item


def _env(chunk_or_library, run_all: bool) -> dict:
    library = chunk_or_library
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(library, "src"), HERE] +
                                        ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.setdefault("NKICC_CACHE", "0")  # cold compiles: the seconds a first run costs
    env.setdefault("OMP_NUM_THREADS", "1")
    # the suite draws some parameters at random at collection (its ranged tests): one seed for every
    # process, as the suite sets for its own xdist workers, so a node id collected here runs there
    env.setdefault("NEURON_PYTHONHASHSEED", "0")
    if run_all:
        env["NKILIB_SIMULATION_RUN_ALL"] = "1"
    return env


def _pytest(library: str, *args: str) -> list:
    return [sys.executable, "-m", "pytest", "--nkicc", "-p", "conformance_suite_shims", "-p", "no:cacheprovider",
            "--test-mode", "simulation", "-q", *args]


def collect(library: str, run_all: bool, paths=(TESTS,)) -> tuple[list, dict]:
    """The suite's node ids (skips included: they are reported with the suite's reason),
    and the test files that do not collect, with the first error of each.

    Each test file's ids are those it collects alone, as the pytest process that runs it
    collects it: the suite draws some parameters at random at collection (its ranged tests),
    and the draws depend on what was collected before (95 of router_topk's 695 ids differ
    between the whole suite's collection and the file's own).

    A path that names an item (`FILE::TEST[PARAMS]`, as a report lists it) is that item
    alone: it is run as named, not widened to its file."""
    named = [_from_library(library, p) for p in paths if "::" in p]
    paths = [p for p in paths if "::" not in p]
    if not paths:
        return list(dict.fromkeys(named)), {}
    ids, broken = _collect(library, run_all, paths)
    files = list(dict.fromkeys(i.split("::")[0] for i in ids))
    with concurrent.futures.ThreadPoolExecutor(2) as pool:  # (subprocesses: a core each)
        alone = dict(zip(files, pool.map(lambda f: _collect(library, run_all, (f,))[0], files)))
    return list(dict.fromkeys([i for f in files for i in alone[f]] + named)), broken


def _from_library(library: str, nodeid: str) -> str:
    """A node id as the runner keeps them: its file relative to the library (the suite's
    rootdir is test/, so ids it prints lack that folder)."""
    return nodeid if os.path.exists(os.path.join(library, nodeid.split("::")[0])) else "test/" + nodeid


def _collect(library: str, run_all: bool, paths) -> tuple[list, dict]:
    proc = subprocess.run(_pytest(library, "--collect-only", *paths), cwd=library, env=_env(library, run_all),
                          capture_output=True, text=True)
    ids = [line.strip() for line in proc.stdout.splitlines() if "::" in line and not line.startswith(" ")]
    # node ids are relative to pytest's rootdir (the suite's pytest.ini puts it in test/); run them from the library
    ids = [_from_library(library, i) for i in ids]
    broken = {}
    for block in proc.stdout.split("_ ERROR collecting ")[1:]:
        path = block.split()[0]
        errors = [line[4:].strip() for line in block.splitlines() if line.startswith("E   ")]
        broken[path] = _clean(errors[-1] if errors else block.splitlines()[1] if len(block.splitlines()) > 1 else "")
    if not ids:
        raise SystemExit(f"conformance --suite: nothing collected in {library}:\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}")
    return ids, broken


def chunks(library: str, ids: list, first: int | None, timeout: float, mem_gb: float, run_all: bool,
           journal: str = "", size: int = 0, every: int = 1, done=frozenset(), commit: str = "") -> list:
    """The items to run, a test file's at a time, in pieces of at most `size` items (0: whole
    files): each file's first `first` items, or every `every`-th one, less those `done` (a
    resumed run's). Pieces let a cluster share out the suite's large files (one holds a third
    of its items) and a stopped run lose one piece, not a file."""
    by_file = collections.OrderedDict()
    for nodeid in ids:
        by_file.setdefault(nodeid.split("::")[0], []).append(nodeid)
    out = []
    for items in by_file.values():
        items = [n for n in (items[:first] if first else items)[::every] if n not in done]
        step = size or len(items) or 1
        out += [Chunk(library, items[i:i + step], timeout, mem_gb, run_all, journal, commit)
                for i in range(0, len(items), step)]
    return out


def run_chunk(chunk: Chunk) -> list:
    """Run one chunk's items in pytest processes; one Item per node id. A process that ends
    before its last item (an INTERNALERROR, the memory cap met outside a test) costs the item it
    was running, which fails with the reason, not the items after it: those run in a new process."""
    done: dict[str, Item] = {}
    todo = list(chunk.nodeids)
    while todo:
        found, proc, wall = _run_pytest(chunk, todo)
        ran = {n: it for n in todo if (it := found.get(_junit_key(n)) or found.get(_junit_key(n).removeprefix("test.")))}
        if not ran:  # no junit report (the process was killed): its verbose lines say what finished
            ran = _verbose_outcomes(proc.stdout, todo)
        done.update(ran)
        rest = [n for n in todo if n not in ran]
        if not rest:
            break
        done[rest[0]] = Item(rest[0], "failed", f"the pytest process ended at this item (rc {proc.returncode}, "
                                                f"{wall:.0f} s): {_why_it_ended(proc)}")
        todo = rest[1:]
    items = []
    for nodeid in chunk.nodeids:
        item = done[nodeid]
        item.nodeid, item.commit, item.mem_gb = nodeid, chunk.commit, chunk.mem_gb
        items.append(item)
    if chunk.journal:
        with open(chunk.journal, "a") as f:
            f.write("".join(json.dumps(asdict(i)) + "\n" for i in items))
    return items


def _run_pytest(chunk: Chunk, nodeids: list) -> tuple[dict, subprocess.CompletedProcess, float]:
    """One pytest process over `nodeids`, under the chunk's memory cap: (junit items by key, process, seconds)."""
    with tempfile.TemporaryDirectory(prefix="nkicc-suite-") as tmp:
        xml = os.path.join(tmp, "out.xml")
        cap = int(chunk.mem_gb * 2 ** 30)

        def limit():
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

        # (-v -v after _pytest's -q: a line per finished item, for a process killed before its report)
        args = _pytest(chunk.library, "-v", "-v", "--junitxml", xml, "--timeout", str(int(chunk.timeout)),
                       "--output-directory", os.path.join(tmp, "artifacts"), *nodeids)
        t0 = time.perf_counter()
        env = {**_env(chunk.library, chunk.run_all), "PYTHONUNBUFFERED": "1"}  # (its lines survive a kill)
        proc = subprocess.run(args, cwd=chunk.library, env=env, capture_output=True, text=True,
                              preexec_fn=limit if cap > 0 else None)
        found = parse_junit(xml) if os.path.exists(xml) else {}
    return found, proc, time.perf_counter() - t0


_OUTCOME = re.compile(r"^(\S+::\S+(?:\[.*\])?) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b")


def _verbose_outcomes(stdout: str, nodeids: list) -> dict:
    """Items pytest's verbose lines report as finished (node ids may be relative to its rootdir)."""
    status = {"PASSED": "passed", "XPASS": "passed", "SKIPPED": "skipped", "XFAIL": "skipped"}
    out = {}
    for line in stdout.splitlines():
        m = _OUTCOME.match(line)
        if m:
            n = next((n for n in nodeids if n == m.group(1) or n.endswith("/" + m.group(1))), None)
            if n is not None:
                out[n] = Item(n, status.get(m.group(2), "failed"), "" if m.group(2) in status else
                              "failed (the process was killed before its report: see the run's output)")
    return out


def _why_it_ended(proc: subprocess.CompletedProcess) -> str:
    """The last INTERNALERROR or error line a process that ended early printed, else its last line."""
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    internal = [ln.removeprefix("INTERNALERROR>").strip() for ln in lines if ln.startswith("INTERNALERROR>")]
    errors = [ln for ln in internal if "Error" in ln] or [ln for ln in lines if "Error" in ln] or lines[-1:] or ["no output"]
    return _clean(errors[-1])[:200]


def _junit_key(nodeid: str) -> str:
    """junit's (classname, name) of a node id, as one string."""
    path, *rest = nodeid.split("::")
    name = rest[-1]
    classname = ".".join([path[:-3].replace("/", ".")] + rest[:-1])
    return f"{classname}::{name}"


def parse_junit(path: str) -> dict:
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        key = f"{case.get('classname')}::{case.get('name')}"
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        item = Item(key, "passed", "", float(case.get("time") or 0.0),
                    float(props.get("nkicc_compile_s") or 0) + float(props.get("nkicc_simulate_s") or 0),
                    int(props.get("nkicc_calls") or 0), float(props.get("rss_peak_mb") or 0),
                    float(props.get("rss_start_mb") or 0), float(props.get("nkicc_added_mb") or 0),
                    props.get("out_of_memory_in") or "")
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                item.status = "skipped" if tag == "skipped" else "failed"
                item.message = first_error(node.get("message") or "", node.text or "")
                if "Timeout" in item.message:
                    item.status = "timeout"
                break
        out[key] = item
    return out


_NKICC = re.compile(r"(error\[E\d+\][^\n]*|E\d{3} [^\n]*)")


# pytest's report of a chained exception: the exception that was raised comes after the last of these
_CHAINED = re.compile(r"^(During handling of the above exception, another exception occurred:"
                      r"|The above exception was the direct cause of the following exception:)$", re.M)


def first_error(message: str, text: str) -> str:
    """One line: nkicc's diagnostic where there is one, else the exception's first line (of the
    exception raised, not of those it was raised while handling)."""
    chained = list(_CHAINED.finditer(text))
    if chained:
        text = text[chained[-1].end():]
    for source in (message, text):
        m = _NKICC.search(source)
        if m:
            return _clean(m.group(1))
    for line in text.splitlines():
        if line.startswith("E   ") and line[4:].strip():
            return _clean(line[4:])
    return _clean(message.splitlines()[0] if message else text.strip().splitlines()[0] if text.strip() else "")


def _clean(line: str) -> str:
    line = re.sub(r"/\S*/(nkilib_src|test)/", r"\1/", line.strip())
    return line[:240]


def run_all_chunks(work: list, workers: int | None, cluster: str | None, log) -> list:
    items: list = []
    if not workers and not cluster:
        for i, chunk in enumerate(work):
            got = run_chunk(chunk)
            items += got
            log(f"[{i + 1}/{len(work)}] {chunk.nodeids[0].split('::')[0]}: " + _summary(got))
        return items
    from nkicc.cluster import connect, run_tasks

    with connect(workers, cluster) as client:
        keys = [f"suite-{i}-{c.nodeids[0].split('::')[0].replace('/', '.')}" for i, c in enumerate(work)]
        seen = []

        def progress(counts):
            if [counts.done, counts.failed] != seen[-2:]:
                seen.extend([counts.done, counts.failed])
                log(f"files: {counts.done} done, {counts.failed} failed, {counts.running} running, of {counts.total}")

        outcomes, _ = run_tasks(client, run_chunk, work, keys, on_progress=progress)
    for chunk, outcome in zip(work, outcomes):
        if outcome.state == "done":
            items += outcome.value
        else:
            items += [Item(n, "failed", f"worker: {outcome.error}") for n in chunk.nodeids]
        log(f"{chunk.nodeids[0].split('::')[0]}: " + _summary(items[-len(chunk.nodeids):]))
    return items


def ran_out_of_memory(item: Item) -> bool:
    return item.status == "failed" and bool(item.out_of_memory_in or "MemoryError" in item.message
                                             or "can't allocate memory" in item.message)


def retry_out_of_memory(items: list, library: str, args, log) -> list:
    """Run the items that ran out of memory under the per-worker cap again, one at a time, under
    --retry-memory-gb (the suite's goldens of its largest shapes need most of a machine: they
    cannot run two at once on it)."""
    todo = [i.nodeid for i in items if ran_out_of_memory(i) and i.mem_gb < args.retry_memory_gb]
    if not todo:
        return items
    log(f"running {len(todo)} items that ran out of memory again, one at a time, under {args.retry_memory_gb:g} GB")
    again, journal, commit = {}, os.path.abspath(args.json + ".partial.jsonl"), nkicc_commit()
    for k, nodeid in enumerate(todo):
        chunk = Chunk(library, [nodeid], args.timeout, args.retry_memory_gb, args.all, journal, commit)
        again[nodeid] = run_chunk(chunk)[0]
        log(f"[{k + 1}/{len(todo)}] {nodeid.split('::', 1)[1][:100]}: {again[nodeid].status}")
    return [again.get(i.nodeid, i) for i in items]


def _summary(items: list) -> str:
    c = collections.Counter(i.status for i in items)
    return ", ".join(f"{n} {s}" for s, n in sorted(c.items()))


def family(nodeid: str) -> str:
    """The folder under test/integration/nkilib (core/attention, experimental/loss, ...)."""
    parts = nodeid.split("::")[0].split("/")
    return "/".join(parts[3:-1]) or parts[-1]


def function(nodeid: str) -> str:
    return nodeid.split("::")[-1].split("[")[0]


# failures whose first error is the suite's or the library's own bug at the snapshot, whatever
# simulator runs it: (a piece of the first error, the one-line reason, pieces its node id holds
# too), from reading their code
SUITE_BUGS = (
    ("missing 1 required positional argument: 'remainderIFused'",
     "the library's mlp_tkg_constants.py builds MLPTKGConstantsDimensionSizes without its remainderIFused argument"),
    ("KeyError: 'mask_out_hbm'",
     "the test's output descriptor reads `mask_out_hbm`, a key its own generator writes as "
     "`mask_out_hbm.must_alias_input`"),
    ("'PerRankLazyInputGenerator' object has no attribute 'items'",
     "the CPU mode's harness passes no per-rank inputs to collectives"),
    ("Incorrect shape for qkv weight scale for row quantization",
     "the test gives ROW-quantized (quantization_type 2) attention blocks a weight scale of one column per q/k/v, "
     "(128, 3), where ROW takes one per output column: the kernel's own assertion rejects it"),
    ("Incorrect shape for weight scale for row quantization",
     "the test gives ROW-quantized (quantization_type 2) attention blocks an output-projection weight scale "
     "broadcast to (128, 1), where ROW takes (128, H): the kernel's own assertion rejects it"),
    ("must match the size of tensor b (3) at non-singleton dimension",
     "the test's ROW-quantized attention block: its torch golden fails on the (128, 3) weight scale the test made"),
    ("attention_block_tkg.py:1120: PSUM tile of shape",
     "the kernel's QK-norm matmul moves B*q_heads*S > 512 fp32 columns into one PSUM tile: nc_matmul allows 512 on "
     "trn2, the suite's default target (4096 from trn3, where the item passes)"),
    ("AssertionError: Validation failed for",
     "STATIC-quantized attention block (quantization_type 1): the kernel rounds its normalized input to bfloat16 and "
     "float8_e4m3 before the QKV matmul (qkv_tkg.py:850-862), the torch golden only divides and clips it "
     "(qkv_tkg_torch.py:148-149); that rounding alone moves the new K rows by up to 3 fp8 steps, past the test's "
     "tolerance (docs/conformance.md, Wrong values)",
     ("test_attention_block_tkg.py::", "-bfloat16-1-")),
)


def suite_bug(item) -> str | None:
    """The one-line reason an item fails on the suite's or library's own bug, if it does."""
    for piece, why, *in_id in SUITE_BUGS:
        if piece in item.message and all(p in item.nodeid for p in (in_id[0] if in_id else ())):
            return why
    return None


def whole_suite_estimate(items: list, population: dict) -> tuple[float, float, list]:
    """What a sample says of the whole suite: each file's mean seconds per sampled item times
    the items the file holds (`population`: file -> items collected), summed; (nkicc seconds,
    the items' own seconds, the files no item was sampled from). A sample takes every K-th item
    of each file, so a small file's one item stands for its few items, not for K."""
    last = {i.nodeid: i for i in items}  # (an item run again, under the larger cap, counts once: its last run)
    by_file = collections.defaultdict(list)
    for i in last.values():
        by_file[i.nodeid.split("::")[0]].append(i)
    nkicc = own = 0.0
    for path, group in by_file.items():
        scale = population.get(path, len(group)) / len(group)
        nkicc += scale * sum(i.nkicc_s for i in group)
        own += scale * sum(i.seconds for i in group)
    return nkicc, own, sorted(p for p in population if p not in by_file)


def write_report(items: list, out: str, snapshot: str, command: str, wall: float, note: str,
                 broken: dict | None = None, population: dict | None = None) -> None:
    blocked = [i for i in items if i.status == "failed" and suite_bug(i)]
    c = collections.Counter(i.status for i in items)
    nk = sum(i.nkicc_s for i in items)
    lines = [BEGIN, "## The library's own test suite", "",
             f"Made by `{command}` at the library's commit `{snapshot}`. {note}", "",
             f"**{len(items)} items: {c['passed']} passed, {c['failed'] - len(blocked)} failed, {len(blocked)} "
             f"blocked by the suite's own bugs, {c['timeout']} timed out, {c['skipped']} skipped by the suite.** "
             + (f"Wall time {wall:.0f} s. " if wall else "") + f"The items' own seconds "
             f"{sum(i.seconds for i in items):.0f} s, of which nkicc (trace, compile, simulate) {nk:.0f} s."
             + _estimate_line(items, population), "",
             "### Test files that do not collect (their items are not counted above)", "",
             "| file | error |", "|---|---|"]
    lines += [f"| {p} | {_cell(e)} |" for p, e in sorted((broken or {}).items())]
    lines += ["", "### Blocked by the suite's own bugs (counted apart from the failures)", "",
              "| items | reason |", "|---:|---|"]
    lines += [f"| {n} | {_cell(why)} |" for why, n in collections.Counter(suite_bug(i) for i in blocked).most_common()]
    lines += ["", "### Failures by first error", "", "| items | first error |", "|---:|---|"]
    errors = collections.Counter(i.message for i in items if i.status in ("failed", "timeout") and i not in blocked)
    lines += [f"| {n} | {_cell(m)} |" for m, n in errors.most_common()]
    lines += ["", "### Skipped by the suite, by reason", "", "| items | reason |", "|---:|---|"]
    lines += [f"| {n} | {_cell(m)} |" for m, n in
              collections.Counter(i.message for i in items if i.status == "skipped").most_common()]
    lines += ["", "### The 20 slowest items by nkicc's seconds", "", "| item | nkicc s | item s | status |",
              "|---|---:|---:|---|"]
    for i in sorted(items, key=lambda i: -i.nkicc_s)[:20]:
        lines.append(f"| `{i.nodeid.split('/')[-1]}` | {i.nkicc_s:.1f} | {i.seconds:.1f} | {i.status} |")
    lines += _memory_section(items)
    lines += ["", "### Per family and test function", "",
              "| family | test function | items | passed | failed | skipped | s | nkicc s | first error (most items) |",
              "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    groups = collections.OrderedDict()
    for i in sorted(items, key=lambda i: (family(i.nodeid), function(i.nodeid))):
        groups.setdefault((family(i.nodeid), function(i.nodeid)), []).append(i)
    for (fam, fn), group in groups.items():
        g = collections.Counter(i.status for i in group)
        errs = collections.Counter(i.message for i in group if i.status in ("failed", "timeout"))
        top = f"{errs.most_common(1)[0][1]}x {errs.most_common(1)[0][0]}" if errs else ""
        lines.append(f"| {fam} | {fn} | {len(group)} | {g['passed']} | {g['failed'] + g['timeout']} | "
                     f"{g['skipped']} | {sum(i.seconds for i in group):.1f} | {sum(i.nkicc_s for i in group):.1f} | "
                     f"{_cell(top)} |")
    lines.append(END)
    text = open(out).read() if os.path.exists(out) else ""
    if BEGIN in text and END in text:
        text = text[:text.index(BEGIN)] + "\n".join(lines) + text[text.index(END) + len(END):]
    else:
        text = text.rstrip("\n") + "\n\n" + "\n".join(lines) + "\n"
    with open(out, "w") as f:
        f.write(text)


def _estimate_line(items: list, population: dict | None) -> str:
    """For a sample (fewer items run than the files hold): the whole suite's seconds it implies."""
    if not population or len({i.nodeid for i in items}) >= sum(population.values()):
        return ""
    nkicc, own, unsampled = whole_suite_estimate(items, population)
    return (f" As a sample of the {sum(population.values()):,} items collected, each file weighted by its own "
            f"item count (its sampled items' mean times its items): nkicc about {nkicc:,.0f} s "
            f"({nkicc / 3600:.1f} h) for the whole suite, the items' own seconds about {own:,.0f} s"
            + (f"; {len(unsampled)} files had no item in the sample" if unsampled else "") + ".")


def _memory_section(items: list) -> list:
    """Whose memory: the items that ran out of it, by whose code was running, and the
    items where nkicc added the most to what the process held."""
    oom = [i for i in items if i.out_of_memory_in]
    by = collections.Counter(i.out_of_memory_in.split(":")[0] for i in oom)
    where = collections.Counter(i.out_of_memory_in.split(": ", 1)[1] for i in oom if ": " in i.out_of_memory_in)
    measured = [i for i in items if i.rss_peak_mb]
    lines = ["", "### Memory: the suite's and nkicc's", "",
             f"Items that ran out of memory under the cap: {len(oom)}, {by['suite']} while the suite's own code "
             f"ran (its inputs and goldens), {by['nkicc']} while nkicc ran. Per item, the plugin reads the process's "
             "peak RSS, and the most that one nkicc call added to what the process held when the call began "
             "(nkicc.memory_watch)." + (" Where in nkicc: " + ", ".join(f"{w} ({n})" for w, n in where.most_common())
                                         + "." if where else "")]
    if measured:
        peak = max(measured, key=lambda i: i.rss_peak_mb)
        lines += ["", f"Of {len(measured)} items measured, the highest peak is {peak.rss_peak_mb:,.0f} MB "
                  f"(nkicc added {peak.nkicc_added_mb:,.0f} MB of it); nkicc's own additions sum to "
                  f"{sum(i.nkicc_added_mb for i in measured):,.0f} MB against "
                  f"{sum(max(0.0, i.rss_peak_mb - i.rss_start_mb - i.nkicc_added_mb) for i in measured):,.0f} MB "
                  "the items grew by otherwise.", "",
                  "| item | peak MB | nkicc added MB | status |", "|---|---:|---:|---|"]
        for i in sorted(measured, key=lambda i: -i.nkicc_added_mb)[:10]:
            lines.append(f"| `{i.nodeid.split('/')[-1]}` | {i.rss_peak_mb:,.0f} | {i.nkicc_added_mb:,.0f} | {i.status} |")
    return lines


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")[:200]


def regressions(items: list, old_json: str) -> list:
    old = {d["nodeid"]: d["status"] for d in json.load(open(old_json))["items"]}
    return [f"{i.nodeid}: {i.status} {i.message}" for i in items if old.get(i.nodeid) == "passed"
            and i.status != "passed"]


def _journal_items(path: str) -> dict:
    """A run's journal, an item per node id: its last line (a rerun's comes after the first)."""
    records = (json.loads(line) for line in open(path) if line.strip())
    return {i.nodeid: i for i in (Item(**r) for r in records if "nodeid" in r)}


def _journal_population(path: str) -> dict:
    """The items each test file held when the journal's run collected them (its last run's)."""
    records = (json.loads(line) for line in open(path) if line.strip())
    return next((r["collected"] for r in reversed(list(records)) if "collected" in r), {})


def nkicc_commit() -> str:
    """This checkout's commit (short), with "+changes" when its work tree differs."""
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True)
    return (head.stdout.strip() or "unknown") + ("+changes" if dirty.stdout.strip() else "")


def snapshot(library: str) -> str:
    proc = subprocess.run(["git", "-C", library, "rev-parse", "HEAD"], capture_output=True, text=True)
    return proc.stdout.strip() or "unknown (not a git checkout: pass --snapshot)"


def main(args) -> int:
    library = os.path.abspath(args.suite)
    if not os.path.isdir(os.path.join(library, TESTS)):
        print(f"conformance --suite: {library} has no {TESTS}; skipping (pass a checkout of aws-neuron/nki-library)")
        return 0
    log = lambda msg: print(msg, flush=True)  # noqa: E731
    if args.from_journal:  # a run that was stopped: report the items it finished
        items = list(_journal_items(args.from_journal).values())
        note = (f"It was stopped before the end: these are the {len(items)} items it finished "
                f"({args.note or 'see the command'}).")
        population = _journal_population(args.from_journal)
        write_report(items, args.out, args.snapshot or snapshot(library), args.command or "(see above)", 0.0, note,
                     population=population)
        with open(args.json, "w") as f:  # (the per-item results, as a finished run writes them; no wall time)
            json.dump({"snapshot": args.snapshot or snapshot(library), "wall_s": None, "not_collected": {},
                       "collected": population, "items": [asdict(i) for i in items]}, f, indent=0)
        log(f"{_summary(items)}; wrote {args.out} and {args.json}")
        return 0
    t0 = time.perf_counter()
    ids, broken = collect(library, args.all, args.paths or (TESTS,))
    for path, error in broken.items():
        log(f"does not collect: {path}: {error}")
    journal = args.json + ".partial.jsonl"
    earlier = []
    if args.resume and os.path.exists(journal):  # the items a stopped run finished are kept, not run again
        wanted = set(ids)
        earlier = [i for n, i in _journal_items(journal).items() if n in wanted]
        log(f"resuming: {len(earlier)} items done in {journal}")
    elif os.path.exists(journal):
        os.remove(journal)
    population = collections.Counter(n.split("::")[0] for n in ids)
    with open(journal, "a") as f:  # (what a sample stands for, should the run be stopped: --from-journal)
        f.write(json.dumps({"collected": dict(population)}) + "\n")
    work = chunks(library, ids, args.first, args.timeout, args.mem_gb, args.all, os.path.abspath(journal),
                  args.chunk_items, args.every, {i.nodeid for i in earlier}, nkicc_commit())
    log(f"{len(ids)} items collected; running {sum(len(c.nodeids) for c in work)} in {len(work)} chunks")
    items = earlier + run_all_chunks(work, args.workers, args.cluster, log)
    if args.retry_memory_gb:
        items = retry_out_of_memory(items, library, args, log)
    order = {n: k for k, n in enumerate(ids)}
    items.sort(key=lambda i: order.get(i.nodeid, len(order)))
    wall = time.perf_counter() - t0
    worse = regressions(items, args.compare) if args.compare else []
    for line in worse:
        print("regression: " + line[:300])
    with open(args.json, "w") as f:
        json.dump({"snapshot": args.snapshot or snapshot(library), "wall_s": wall, "not_collected": broken,
                   "collected": dict(population), "items": [asdict(i) for i in items]}, f, indent=0)
    where = f"{args.workers} local Dask workers" if args.workers else f"the Dask cluster {args.cluster}" \
        if args.cluster else "one process at a time"
    ran = f"the first {args.first} items of each test file" if args.first else \
        f"every {args.every}th item of each test file" if args.every > 1 else "every item"
    ran += f", every {args.every}th of them" if args.first and args.every > 1 else ""
    commits = collections.Counter(i.commit for i in items if i.commit)
    note = (f"It ran {ran} ({len(items)} of the {len(ids)} collected"
            f"{', large shapes included (NKILIB_SIMULATION_RUN_ALL=1)' if args.all else ''}), {where}, "
            f"{args.timeout:.0f} s and {args.mem_gb:g} GB per item, in pieces of at most "
            f"{args.chunk_items or 'a whole file'} items."
            + (f" The {sum(i.mem_gb == args.retry_memory_gb for i in items)} items that ran out of memory ran "
               f"again, one at a time, under {args.retry_memory_gb:g} GB." if args.retry_memory_gb else "")
            + (f" {len(earlier)} of them were run by an earlier, stopped run (--resume); the wall time is this "
               f"run's." if earlier else "")
            + (" nkicc's commits: " + ", ".join(f"`{c}` ({n} items)" for c, n in commits.most_common()) + "."
               if len(commits) > 1 else f" nkicc's commit: `{next(iter(commits))}`." if commits else ""))
    command = "python bench/conformance.py --suite LIBRARY_DIR" + (f" --first {args.first}" if args.first else "") + \
        (f" --every {args.every}" if args.every > 1 else "") + \
        (" --all" if args.all else "") + (f" --workers {args.workers}" if args.workers else "") + \
        f" --timeout {args.timeout:g} --mem-gb {args.mem_gb:g}" + \
        (f" --retry-memory-gb {args.retry_memory_gb:g}" if args.retry_memory_gb else "")
    write_report(items, args.out, args.snapshot or snapshot(library), command, wall, note, broken, population)
    os.remove(journal)
    log(f"{_summary(items)}; wrote {args.out} and {args.json}")
    return 1 if worse else 0
