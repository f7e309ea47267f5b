"""The shared cache tier on a real redis-server (nkicc.cache.remote,
docs/scale-out.md): lookups go local -> Redis, a remote hit is written back
locally, new entries go to both; faults (a killed or hung server, corrupt
and foreign values, another secret, concurrent writers) never fail a compile
and never serve anything wrong. Every test starts its own redis-server on a
free loopback port (the `redis_server` fixture, tests/conftest.py) and skips
when redis-server is not installed."""
import json
import multiprocessing
import os
import pathlib
import pickle
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import nkicc
from tests.support.redis_server import REDIS_SERVER, RedisProcess
from tests.support.paths import REPO
from nkicc.cache import remote as remote_mod
from nkicc.cache.format import CorruptEntry, pack, unpack
from nkicc.cache.store import forget_stores
from nkicc.cache.stats import Counters

from tests.support import cache_kernels as ck
from tests.support.cli import run_cli

TESTS = REPO / "tests" / "support"  # cache_kernels.py
PREFIX = remote_mod.NAMESPACE + "nkicc-kernel-"
SOURCE_PREFIX = remote_mod.NAMESPACE + "nkicc-source-"


# --- helpers ---------------------------------------------------------------------------------------

@pytest.fixture
def tiers(redis_server, tmp_path, monkeypatch):
    """use(name, secret=..., url=...): compile in this process with a fresh
    local cache folder `name` and the test's Redis behind it."""
    for var in ("NKICC_CACHE", "NKICC_CACHE_SIZE", "NKICC_CACHE_SECRET", "NKICC_CACHE_SECRET_FILE"):
        monkeypatch.delenv(var, raising=False)

    def use(name: str, secret: str | None = None, url: str | None = None) -> pathlib.Path:
        forget_stores()
        d = tmp_path / name
        monkeypatch.setenv("NKICC_CACHE_DIR", str(d))
        monkeypatch.setenv("NKICC_REMOTE_CACHE", url or redis_server.url)
        if secret is None:
            monkeypatch.delenv("NKICC_CACHE_SECRET", raising=False)
        else:
            monkeypatch.setenv("NKICC_CACHE_SECRET", secret)
        return d

    yield use
    forget_stores()


def counters(d) -> dict:
    return Counters(str(d)).read()


def remote_keys(server, prefix: str = PREFIX) -> list[bytes]:
    return sorted(server.client().keys(prefix + "*"))


def shift_input(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((128, 64)).astype(np.float32)


def compile_shift(amount: float, seed: int):
    """Compile ck.shift(amount), check it against numpy on random data; its report's cache section."""
    x = shift_input(seed)
    c = nkicc.compile(ck.shift, x, amount=amount)
    np.testing.assert_allclose(c.run(x), x + np.float32(amount), rtol=1e-6)
    return c.report["cache"]


def subprocess_env(cache: pathlib.Path, url: str, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NKICC_CACHE_SECRET")}
    return {**env, "NKICC_CACHE_DIR": str(cache), "NKICC_REMOTE_CACHE": url, "PYTHONPATH": str(REPO),
            "OPENBLAS_NUM_THREADS": "1", **extra}


# a process that compiles a set of kernels, checks each result against numpy
# on random data and prints the cache sections of the reports as JSON
COMPILE_ALL = textwrap.dedent('''
    import json, sys
    import numpy as np
    import nkicc
    from tests.support import cache_kernels as ck
    rng = np.random.default_rng(int(sys.argv[1]))
    out = []
    def check(name, compiled, got, want):
        out.append({"name": name, "ok": bool(np.allclose(got, want, rtol=1e-4, atol=1e-4)), **compiled.report["cache"]})
    x = rng.standard_normal((ck.ROWS, ck.COLS)).astype(np.float32)
    c = nkicc.compile(ck.stages, x)
    check("stages", c, c.run(x), ck.reference_stages(x))
    y = rng.standard_normal((128, 64)).astype(np.float32)
    for amount in (0.5, 1.5, 2.5):
        c = nkicc.compile(ck.shift, y, amount=amount)
        check(f"shift{amount}", c, c.run(y), y + np.float32(amount))
    a_t = rng.standard_normal((256, 128)).astype(np.float32)
    b = rng.standard_normal((256, 64)).astype(np.float32)
    c = nkicc.compile(ck.matmul_acc, a_t, b)
    check("matmul_acc", c, c.run(a_t, b), a_t.T.astype(np.float64) @ b)
    print(json.dumps(out))
''')


def compile_all(cache: pathlib.Path, url: str, seed: int, **env) -> tuple[list[dict], str]:
    p = subprocess.run([sys.executable, "-c", COMPILE_ALL, str(seed)], capture_output=True, text=True,
                       env=subprocess_env(cache, url, **env), timeout=300)
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr, p.stderr
    reports = json.loads(p.stdout)
    assert len(reports) == 5 and all(r["ok"] for r in reports), reports
    return reports, p.stderr


# --- the format of the tier ------------------------------------------------------------------------

def test_signing_envelope_and_redaction():
    entry = pack("kernel", "nkicc-kernel-ab", {"s": 1.0})
    name = remote_mod.NAMESPACE + "nkicc-kernel-ab"
    signed = remote_mod.sign(b"one secret", name, entry)
    assert signed.startswith(b"nkicc-signed 1 ") and signed.endswith(entry)
    assert remote_mod.open_envelope(b"one secret", name, signed) == entry
    assert remote_mod.open_envelope(None, name, signed) == entry      # no secret: the checksum still guards
    assert remote_mod.open_envelope(None, name, entry) == entry
    for secret, value, why in [(b"another secret", signed, "wrong signature"), (b"one secret", entry, "unsigned"),
                               (b"one secret", remote_mod.sign(b"one secret", name + "x", entry), "wrong signature"),
                               (b"one secret", signed[:-1] + bytes([signed[-1] ^ 1]), "wrong signature")]:
        with pytest.raises(remote_mod.Refused, match=why):
            remote_mod.open_envelope(secret, name, value)
    assert remote_mod.NAMESPACE == "nkicc:f1:"
    assert remote_mod.redact("redis://alice:pa%40ss@cache.example:6380/2?password=x") == \
        "redis://alice:***@cache.example:6380/2"
    assert remote_mod.redact("rediss://:pw@[::1]:6379/0") == "rediss://:***@[::1]:6379/0"
    assert remote_mod.redact("redis://localhost/0") == "redis://localhost/0"


# --- lookups: local, then Redis --------------------------------------------------------------------

def test_remote_hit_backfills_the_local_tier(tiers, redis_server):
    a = tiers("a")
    first = compile_shift(0.75, 1)
    assert first["kernel"] == "miss"
    keys = remote_keys(redis_server)
    assert len(keys) == 1                                   # new entries go to both tiers ...
    key = keys[0].decode()[len(remote_mod.NAMESPACE):]
    value = redis_server.client().get(keys[0])
    meta, ir = unpack(value, "kernel", key)                 # ... in the local tier's own format
    assert ir is not None and "passes" in meta
    names = [n.decode() for n in redis_server.client().keys("*")]
    assert len([n for n in names if n.startswith(remote_mod.NAMESPACE + "nkicc-source-")]) == 1  # the source entry too
    assert counters(a)["remote.stores"] == 2 and counters(a)["stores"] >= 2
    assert not any(n.startswith(remote_mod.NAMESPACE + "nkicc-region-") for n in names)  # regions stay local

    b = tiers("b")                                          # an empty local cache, a warm Redis
    hit = compile_shift(0.75, 2)
    assert (hit["source"], hit["kernel"], hit["tier"]) == ("hit", "hit", "remote")  # not traced
    c = counters(b)
    # locally: the source-level key, then the kernel key, both miss; Redis serves both
    assert (c["remote.hit"], c["remote.backfills"], c["local.miss"]) == (2, 2, 2)
    redis_server.stop()                                     # the local tier now has it on its own
    forget_stores()
    again = compile_shift(0.75, 3)
    assert (again["kernel"], again["tier"]) == ("hit", "local")
    assert counters(b)["local.hit"] == 2  # the source-level entry written back, then the kernel entry
    from nkicc.cache.store import open_store
    assert open_store().remote._made is None                # a local hit never opened a connection


def test_a_second_process_with_an_empty_local_cache_hits_redis_for_every_kernel(redis_server, tmp_path):
    cold, _ = compile_all(tmp_path / "machine1", redis_server.url, seed=1)
    assert all(r["kernel"] == "miss" for r in cold)
    assert len(remote_keys(redis_server)) == 5
    warm, err = compile_all(tmp_path / "machine2", redis_server.url, seed=2)
    assert len(remote_keys(redis_server, SOURCE_PREFIX)) == 5
    # source hits from Redis: no kernel was traced on the second machine
    assert [(r["source"], r["kernel"], r["tier"]) for r in warm] == [("hit", "hit", "remote")] * 5, warm
    assert "warning" not in err
    c = counters(tmp_path / "machine2")
    assert (c["remote.hit"], c.get("remote.miss", 0), c["remote.backfills"]) == (10, 0, 10)
    stats = run_cli("cache", "stats", "--json", env=subprocess_env(tmp_path / "machine2", redis_server.url))
    s = json.loads(stats.stdout)
    assert s["remote"]["url"] == redis_server.url and s["remote"]["hits"] == 10 and s["remote"]["entries"] == 10
    assert s["remote"]["bytes"] == sum(redis_server.client().strlen(k) for k in
                                       remote_keys(redis_server) + remote_keys(redis_server, SOURCE_PREFIX))
    # each kernel misses twice locally: its source-level key, then its kernel key
    assert s["local"]["misses"] == 10 and s["local"]["entries"] >= 5 and s["local"]["bytes"] > 0


def test_a_new_machine_with_a_warm_redis_does_not_trace_and_a_stale_source_entry_misses(redis_server, tmp_path):
    """Source-level entries are in Redis too: a new process with an empty local
    tier takes both the source and the kernel entry from Redis and does not
    trace; after a helper module is edited, the old source entry is a miss."""
    from tests.cache.test_cache_levels import HELPERS, KERNEL, WORKER
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "lvl_helpers.py").write_text(HELPERS)
    (mods / "lvl_kernel.py").write_text(KERNEL)

    def on(machine: str, factor=2.0, seed=0) -> dict:
        env = subprocess_env(tmp_path / machine, redis_server.url, PYTHONDONTWRITEBYTECODE="1")
        r = subprocess.run([sys.executable, "-c", WORKER, str(mods), str(factor), "1.0", "0.5", str(seed)],
                           capture_output=True, text=True, env=env, timeout=300)
        assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
        out = json.loads(r.stdout.strip().splitlines()[-1])
        assert out["ok"] and out["same_as_off"], out   # numpy on random data; the cache-off compile
        return out

    cold = on("m1", seed=1)
    assert (cold["cache"]["source"], cold["cache"]["kernel"]) == ("miss", "miss") and cold["trace_s"] > 0
    assert len(remote_keys(redis_server, SOURCE_PREFIX)) == 1 and len(remote_keys(redis_server)) == 1
    warm = on("m2", seed=2)                                 # an empty local tier, Redis warm
    assert (warm["cache"]["source"], warm["cache"]["kernel"], warm["cache"]["tier"]) == ("hit", "hit", "remote")
    assert warm["trace_s"] == 0.0 and warm["ir"] == cold["ir"]  # not traced; the very kernel m1 compiled
    c = counters(tmp_path / "m2")
    assert (c["remote.hit"], c.get("remote.miss", 0), c["local.miss"], c["source.hit"]) == (2, 0, 2, 1)

    (mods / "lvl_helpers.py").write_text(HELPERS.replace("nl.multiply(t, FACTOR)", "nl.multiply(t, FACTOR + 1.0)"))
    stale = on("m3", factor=3.0, seed=3)                    # the helper changed: the stored source entry is stale
    assert (stale["cache"]["source"], stale["cache"]["kernel"]) == ("miss", "miss"), stale["cache"]
    assert stale["trace_s"] > 0
    c = counters(tmp_path / "m3")
    assert (c.get("remote.hit", 0), c["remote.miss"], c["source.miss"]) == (0, 2, 1)
    again = on("m2", factor=3.0, seed=4)                    # m2's local source entry is stale too; m3's serves
    assert (again["cache"]["source"], again["cache"]["kernel"], again["cache"]["tier"]) == ("hit", "hit", "remote")
    assert again["trace_s"] == 0.0 and again["ir"] == stale["ir"]


# --- faults ----------------------------------------------------------------------------------------

SEQUENCE = textwrap.dedent('''
    import json, sys
    import numpy as np
    import nkicc
    from tests.support import cache_kernels as ck
    rng = np.random.default_rng(7)
    for line in sys.stdin:          # one compile per line: the amount
        amount = float(line)
        x = rng.standard_normal((128, 64)).astype(np.float32)
        c = nkicc.compile(ck.shift, x, amount=amount)
        ok = bool(np.allclose(c.run(x), x + np.float32(amount), rtol=1e-6))
        print(json.dumps({"ok": ok, **c.report["cache"]}), flush=True)
''')


def test_redis_killed_in_the_middle_of_a_sequence_of_compiles(redis_server, tmp_path):
    amounts = [0.25 * i for i in range(1, 7)]
    warmer = subprocess.run([sys.executable, "-c", SEQUENCE], input="".join(f"{a}\n" for a in amounts),
                            capture_output=True, text=True, env=subprocess_env(tmp_path / "m1", redis_server.url),
                            timeout=300)
    assert warmer.returncode == 0, warmer.stderr
    assert len(remote_keys(redis_server)) == 6
    p = subprocess.Popen([sys.executable, "-c", SEQUENCE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=subprocess_env(tmp_path / "m2", redis_server.url))
    reports = []
    for i, amount in enumerate(amounts + [amounts[0]]):
        if i == 3:
            redis_server.proc.kill()                        # SIGKILL, mid-sequence
            redis_server.proc.wait()
        p.stdin.write(f"{amount}\n")
        p.stdin.flush()
        reports.append(json.loads(p.stdout.readline()))
    p.stdin.close()
    err = p.stderr.read()
    assert p.wait(timeout=60) == 0, err
    assert all(r["ok"] for r in reports), reports
    assert [(r["kernel"], r.get("tier")) for r in reports] == \
        [("hit", "remote")] * 3 + [("miss", None)] * 3 + [("hit", "local")]
    warnings = [line for line in err.splitlines() if line.startswith("warning")]
    assert len(warnings) == 1 and warnings[0].startswith("warning[W502] remote cache redis://127.0.0.1:"), err
    assert "compiling with the local cache only" in warnings[0] and "Traceback" not in err
    c = counters(tmp_path / "m2")
    assert (c["remote.hit"], c["remote.errors"], c["compiles"]) == (6, 1, 7)  # a source and a kernel entry each


def talks_to_redis(monkeypatch) -> list[tuple[str, float, str]]:
    """Each call this process makes to the Redis backend from now on: (method, seconds waited, the
    exception's name or "")."""
    from nkicc.plugins.redis_cache import RedisBackend
    calls = []

    def timed(name, method):
        def call(self, *args, **kw):
            t0, raised = time.monotonic(), ""
            try:
                return method(self, *args, **kw)
            except Exception as exc:
                raised = type(exc).__name__
                raise
            finally:
                calls.append((name, time.monotonic() - t0, raised))
        return call

    for name in ("get", "set_many", "usage"):
        monkeypatch.setattr(RedisBackend, name, timed(name, getattr(RedisBackend, name)))
    return calls


def test_a_hung_redis_costs_a_bounded_wait_once(tiers, redis_server, capfd, monkeypatch):
    tiers("a")
    assert compile_shift(1.25, 1)["kernel"] == "miss"
    tiers("b")
    calls = talks_to_redis(monkeypatch)
    os.kill(redis_server.proc.pid, signal.SIGSTOP)          # accepts connections, never answers
    try:
        first = compile_shift(1.25, 2)
        first_calls = calls[:]
        calls.clear()
        second = compile_shift(1.5, 3)
    finally:
        os.kill(redis_server.proc.pid, signal.SIGCONT)
    from nkicc.plugins.redis_cache import SOCKET_TIMEOUT_S
    assert first["kernel"] == "miss" and second["kernel"] == "miss"
    # one wait, on the read, bounded by the timeout (the compile's own time, which a loaded
    # machine stretches, is not in it); the compile went on
    assert len(first_calls) == 1 and first_calls[0][2] == "TimeoutError", first_calls
    assert first_calls[0][1] < SOCKET_TIMEOUT_S + 5
    assert calls == []                                      # the tier is off: no second wait
    err = capfd.readouterr().err
    assert err.count("warning[W502]") == 1 and "Timeout" in err, err


class StoppedClock:
    """The `time` module as cache/remote.py sees it, with a monotonic clock only the test moves."""

    def __init__(self) -> None:
        self.now = time.monotonic()

    def monotonic(self) -> float:
        return self.now

    def __getattr__(self, name):
        return getattr(time, name)


def test_a_restarted_redis_is_used_again_without_a_second_warning(tiers, redis_server, tmp_path, monkeypatch,
                                                                   capfd):
    clock = StoppedClock()
    monkeypatch.setattr(remote_mod, "time", clock)         # the retry is due when the test says
    d = tiers("a")
    redis_server.stop()
    assert compile_shift(7.0, 1)["kernel"] == "miss"       # fails: off, one warning
    assert compile_shift(7.25, 2)["kernel"] == "miss"      # off: not even tried
    back = RedisProcess(tmp_path / "redis-again", port=redis_server.port)
    try:
        clock.now += remote_mod.RETRY_AFTER_S
        assert compile_shift(7.5, 3)["kernel"] == "miss"   # tried again: works, the entry goes to Redis
        assert len(back.client().keys(PREFIX + "*")) == 1
    finally:
        back.stop()
    assert counters(d)["remote.errors"] == 1 and counters(d)["remote.stores"] == 2  # its source and kernel entries
    assert capfd.readouterr().err.count("warning[W502]") == 1


def _damages(good: bytes, other: bytes) -> dict[str, bytes]:
    head, _, body = good.partition(b"\n")
    return {
        "flipped byte": head + b"\n" + body[:10] + bytes([body[10] ^ 0x40]) + body[11:],
        "truncated": good[: len(good) // 2],
        "garbage": b"hello, this is not an entry",
        "a pickle": pickle.dumps({"passes": [], "warnings": []}),
        "another key's entry": other,
        "another format": good.replace(b"nkicc-cache 1 ", b"nkicc-cache 9 ", 1),
    }


@pytest.mark.parametrize("kind", ["kernel", "source"])
def test_a_corrupt_or_foreign_value_in_redis_is_a_counted_miss(tiers, redis_server, kind):
    prefix = PREFIX if kind == "kernel" else SOURCE_PREFIX
    tiers("writer")
    compile_shift(2.0, 1)
    (name_2,) = remote_keys(redis_server, prefix)
    compile_shift(3.0, 1)
    (name_3,) = [k for k in remote_keys(redis_server, prefix) if k != name_2]
    client = redis_server.client()
    good, other = client.get(name_2), client.get(name_3)
    for i, (what, bad) in enumerate(_damages(good, other).items()):
        client.set(name_2, bad)
        d = tiers(f"reader{i}")
        report = compile_shift(2.0, 10 + i)                 # checked against numpy
        c = counters(d)
        if kind == "kernel":  # the source entry hits, the kernel entry it names is bad: traced and compiled
            assert (report["source"], report["kernel"]) == ("miss", "miss"), what
        else:                 # the source entry is bad: traced, and the kernel entry hits in Redis
            assert (report["source"], report["kernel"], report["tier"]) == ("miss", "hit", "remote"), what
        assert (c.get("remote.corrupt", 0), c.get("remote.hit", 0), c.get("remote.backfills", 0)) == (1, 1, 1), what
        key = name_2.decode()[len(remote_mod.NAMESPACE):]
        unpack(client.get(name_2), kind, key)               # the compile wrote a good entry over it
    d = tiers("last")
    last = compile_shift(2.0, 99)
    assert (last["source"], last["tier"]) == ("hit", "remote")


def test_an_entry_signed_with_another_secret_is_refused(tiers, redis_server, tmp_path, capfd):
    tiers("alice", secret="alice's secret")
    compile_shift(4.0, 1)
    (name,) = remote_keys(redis_server)
    assert redis_server.client().get(name).startswith(b"nkicc-signed 1 ")

    mallory = tiers("mallory", secret="another secret")
    assert compile_shift(4.0, 2)["kernel"] == "miss"       # refused, compiled, correct
    # refused: the source entry, then the kernel entry (each once)
    assert counters(mallory)["remote.refused"] == 2 and counters(mallory).get("remote.hit", 0) == 0

    tiers("unsigned")                                       # no secret: writes an unsigned entry
    redis_server.client().delete(name)
    assert compile_shift(4.0, 3)["kernel"] == "miss"
    assert redis_server.client().get(name).startswith(b"nkicc-cache ")
    alice = tiers("alice2", secret="alice's secret")
    assert compile_shift(4.0, 4)["kernel"] == "miss"       # an unsigned entry is refused too
    assert counters(alice)["remote.refused"] == 2          # (the source and the kernel entry)

    key_file = tmp_path / "key"
    key_file.write_text("alice's secret\n")
    d = tiers("alice3")                                     # the secret from a key file: alice2's entry hits
    os.environ["NKICC_CACHE_SECRET_FILE"] = str(key_file)
    try:
        assert compile_shift(4.0, 5)["tier"] == "remote"
        assert counters(d)["remote.hit"] == 2
        os.environ["NKICC_CACHE_SECRET_FILE"] = str(tmp_path / "no-such-key")
        d = tiers("nokey")                                  # an unreadable key file: no remote tier at all
        assert compile_shift(4.0, 6)["kernel"] == "miss"
        assert not any(k.startswith("remote.") for k in counters(d))
    finally:
        del os.environ["NKICC_CACHE_SECRET_FILE"]
    err = capfd.readouterr().err
    assert err.count("warning[W502]") == 1 and "cannot read NKICC_CACHE_SECRET_FILE" in err


def _hammer(url: str, writer: int, rounds: int, keys: list[str], results) -> None:
    """One of 8 processes: write and read the same keys as the others."""
    from nkicc.plugins.redis_cache import RedisBackend
    counts: dict[str, int] = {}

    def count(name, n=1):
        counts[name] = counts.get(name, 0) + n

    tier = remote_mod.RemoteTier(RedisBackend, url, b"shared secret", count, lambda *a, **k: None)
    rng = np.random.default_rng(writer)
    bad = 0
    for r in range(rounds):
        for key in keys:
            pad = rng.bytes(int(rng.integers(1, 30_000))).hex()  # sizes vary: a torn value would show
            tier.put_many([(key, pack("kernel", key, {"writer": writer, "round": r, "pad": pad}))])
            # the key just written, and (once this process wrote them all) any other
            for name in [key] + ([keys[int(rng.integers(len(keys)))]] if r else []):
                got = tier.get(name, "kernel")
                if got is None or got[0]["writer"] not in range(8) or not got[0]["pad"]:
                    bad += 1
    results.put((writer, bad, counts))


def test_eight_processes_writing_the_same_keys_read_only_whole_entries(redis_server):
    keys = [f"nkicc-kernel-{i:064x}" for i in range(4)]
    ctx = multiprocessing.get_context("forkserver")  # not fork: the test process may hold JAX's threads
    results = ctx.Queue()
    procs = [ctx.Process(target=_hammer, args=(redis_server.url, w, 15, keys, results)) for w in range(8)]
    for p in procs:
        p.start()
    out = [results.get(timeout=240) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert sorted(w for w, _, _ in out) == list(range(8))
    for writer, bad, counts in out:
        assert bad == 0, (writer, counts)
        assert counts == {"remote.stores": 15 * 4, "remote.hit": 15 * 4 + 14 * 4}, counts
    for key in keys:                                        # what is left is one whole, signed entry
        value = redis_server.client().get(remote_mod.NAMESPACE + key)
        meta, _ = unpack(remote_mod.open_envelope(b"shared secret", remote_mod.NAMESPACE + key, value), "kernel", key)
        assert meta["writer"] in range(8)


# --- URLs: passwords, TLS, schemes -----------------------------------------------------------------

def nkicc_cli(*args, env):
    return run_cli(*args, env=env, cwd=REPO)


def test_passwords_work_and_never_show(tmp_path):
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed")
    server = RedisProcess(tmp_path / "redis", "--requirepass", "Def4ult-pw-x9",
                          "--user", "alice", "on", ">Al1ce-pw-q7", "~*", "&*", "+@all")
    try:
        passwords = ("Def4ult-pw-x9", "Al1ce-pw-q7", "Wr0ng-pw-z3")
        url = f"redis://alice:Al1ce-pw-q7@127.0.0.1:{server.port}/0"
        kernel = "examples/matmul.py::matmul_tiled"
        outputs = []
        first = nkicc_cli("compile", kernel, "--remote-cache", url, "--report", str(tmp_path / "r.json"),
                          env=subprocess_env(tmp_path / "m1", ""))
        assert first.returncode == 0, first.stderr
        outputs += [first.stdout, first.stderr, (tmp_path / "r.json").read_text()]
        assert len(server.client(password="Def4ult-pw-x9").keys(PREFIX + "*")) == 1
        second = nkicc_cli("compile", kernel, "--remote-cache", url, env=subprocess_env(tmp_path / "m2", ""))
        assert second.returncode == 0, second.stderr
        assert "cache: kernel hit (source hit: not traced) (remote)" in second.stdout, second.stdout
        third = nkicc_cli("simulate", kernel, "--remote-cache", url, env=subprocess_env(tmp_path / "m4", ""))
        assert third.returncode == 0, third.stderr
        assert counters(tmp_path / "m4")["remote.hit"] == 2
        outputs += [second.stdout, second.stderr, third.stdout, third.stderr]
        for env_url, fmt in ((url, []), (f"redis://127.0.0.1:{server.port}/0?password=Def4ult-pw-x9", ["--json"])):
            stats = nkicc_cli("cache", "stats", *fmt, env=subprocess_env(tmp_path / "m2", env_url))
            assert stats.returncode == 0, stats.stderr
            outputs += [stats.stdout, stats.stderr]
        assert "remote tier redis://alice:***@127.0.0.1" in outputs[-4] and ": 2 hits" in outputs[-4], outputs[-4]
        remote = json.loads(outputs[-2])["remote"]
        assert (remote["url"], remote["hits"], remote["entries"]) == (f"redis://127.0.0.1:{server.port}/0", 2, 2)
        wrong = nkicc_cli("compile", kernel, env=subprocess_env(
            tmp_path / "m3", f"redis://alice:Wr0ng-pw-z3@127.0.0.1:{server.port}/0"))
        assert wrong.returncode == 0, wrong.stderr
        assert wrong.stderr.count("warning[W502]") == 1 and "alice:***@" in wrong.stderr, wrong.stderr
        outputs += [wrong.stdout, wrong.stderr]
        text = "\n".join(outputs)
        for pw in passwords:
            assert pw not in text
    finally:
        server.stop()


def test_rediss_url_over_tls(tmp_path):
    if REDIS_SERVER is None or not _has("openssl"):
        pytest.skip("needs redis-server and openssl")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    made = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                           "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                           "-addext", "subjectAltName=IP:127.0.0.1"], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"openssl cannot make a certificate: {made.stderr[-200:]}")
    try:
        server = RedisProcess(tmp_path / "redis", tls=(cert, key, cert))
    except RuntimeError as exc:
        pytest.skip(f"this redis-server has no TLS: {exc}")
    try:
        url = f"{server.url}?ssl_ca_certs={cert}"
        runs = []
        for machine, u in (("m1", url), ("m2", url), ("m3", f"redis://127.0.0.1:{server.port}/0")):
            p = subprocess.run([sys.executable, "-c", SEQUENCE], input="0.5\n", capture_output=True, text=True,
                               env=subprocess_env(tmp_path / machine, u), timeout=300)
            assert p.returncode == 0, p.stderr
            runs.append((json.loads(p.stdout), p.stderr))
        assert all(r["ok"] for r, _ in runs)
        assert [(r["kernel"], r.get("tier")) for r, _ in runs] == [("miss", None), ("hit", "remote"), ("miss", None)]
        assert "warning" not in runs[0][1] + runs[1][1]
        assert runs[2][1].count("warning[W502]") == 1           # plain redis:// to a TLS port: one warning
        assert len(server.client(ssl=True, ssl_ca_certs=str(cert)).keys(PREFIX + "*")) == 1
    finally:
        server.stop()


def _has(tool: str) -> bool:
    import shutil
    return shutil.which(tool) is not None


def test_an_unknown_scheme_warns_once_and_compiles(tmp_path, monkeypatch, capfd):
    d = tmp_path / "a"
    monkeypatch.setenv("NKICC_CACHE_DIR", str(d))
    monkeypatch.setenv("NKICC_REMOTE_CACHE", "memcached://127.0.0.1:11211")
    forget_stores()
    try:
        assert compile_shift(5.0, 1)["kernel"] == "miss"
        assert compile_shift(5.0, 2)["kernel"] == "hit"
    finally:
        forget_stores()
    err = capfd.readouterr().err
    assert err.count("warning[W502]") == 1 and "no cache backend for memcached://" in err
    assert not any(k.startswith("remote.") for k in counters(d))


@pytest.mark.skipif(not os.environ.get("NKICC_TEST_REDIS"), reason="NKICC_TEST_REDIS is not set (.ci/run sets it)")
def test_the_ci_redis_server_serves_as_the_shared_tier(tmp_path):
    url = os.environ["NKICC_TEST_REDIS"]
    runs = []
    for machine in ("m1", "m2"):
        p = subprocess.run([sys.executable, "-c", SEQUENCE], input="8.5\n9.5\n", capture_output=True, text=True,
                           env=subprocess_env(tmp_path / machine, url), timeout=300)
        assert p.returncode == 0 and "warning" not in p.stderr, p.stderr
        runs.append([json.loads(line) for line in p.stdout.splitlines()])
    assert all(r["ok"] for rs in runs for r in rs)
    assert [r.get("tier") for r in runs[1]] == ["remote", "remote"]   # m1 wrote them (or found them there)


def test_nkicc_run_takes_remote_cache(redis_server, tmp_path):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent('''
        import sys
        import numpy as np
        import nkicc
        from tests.support import cache_kernels as ck
        x = np.random.default_rng(int(sys.argv[1])).standard_normal((128, 64)).astype(np.float32)
        for amount in (0.5, 1.5):
            c = nkicc.compile(ck.shift, x, amount=amount)
            assert np.allclose(c.run(x), x + np.float32(amount), rtol=1e-6)
        print("ok")
    '''))
    for seed, machine in enumerate(("m1", "m2")):
        p = nkicc_cli("run", "--remote-cache", redis_server.url, str(script), str(seed),
                      env=subprocess_env(tmp_path / machine, ""))
        assert p.returncode == 0 and p.stdout.strip() == "ok", p.stdout + p.stderr
    c = counters(tmp_path / "m2")
    assert (c["remote.hit"], c["local.miss"], c.get("remote.miss", 0)) == (4, 4, 0)  # source + kernel keys


def test_a_plugin_can_serve_another_scheme_through_the_same_hook(tmp_path, monkeypatch):
    from tests.cache import dict_tier_plugin
    from tests.cache import legacy_backend_plugin
    dict_tier_plugin.TABLE.clear()
    legacy_backend_plugin.ASKED.clear()
    monkeypatch.setenv("NKICC_REMOTE_CACHE", "dict://team")
    monkeypatch.setenv("NKICC_CACHE_SECRET", "s")
    x = shift_input(5)
    reports = []
    for machine in ("m1", "m2"):
        monkeypatch.setenv("NKICC_CACHE_DIR", str(tmp_path / machine))
        forget_stores()
        c = nkicc.compile(ck.shift, x, amount=6.5, passes={"plugins": ("tests.cache.dict_tier_plugin", "tests.cache.legacy_backend_plugin")})
        np.testing.assert_allclose(c.run(x), x + np.float32(6.5), rtol=1e-6)
        reports.append(c.report["cache"])
    forget_stores()
    assert [(r["kernel"], r.get("tier")) for r in reports] == [("miss", None), ("hit", "remote")]
    assert reports[1]["source"] == "hit"
    (kernel_name, kernel_value), (source_name, source_value) = sorted(dict_tier_plugin.TABLE.items())
    assert kernel_name.startswith(PREFIX) and kernel_value.startswith(b"nkicc-signed 1 ")
    assert source_name.startswith(SOURCE_PREFIX) and source_value.startswith(b"nkicc-signed 1 ")
    assert counters(tmp_path / "m2")["remote.hit"] == 2
    # the implementation without `remote` was asked for each local tier, never for the shared one
    assert legacy_backend_plugin.ASKED == [str(tmp_path / "m1"), str(tmp_path / "m2")]
