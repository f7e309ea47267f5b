"""The tracer reads kernels' files once each (language/sources.py), and reads
them again when they change: tensor names, the loops it rolls and the helpers
a loop body calls all come from the file as it is when the kernel is traced."""
from __future__ import annotations

import importlib.util
import os
import sys

import nkicc
import numpy as np

KERNEL = '''
import functools
import nkicc.language as nl

calls = []


def quiet(f):
    return f


def wrapped(f):
    @functools.wraps(f)
    def call(*args):
        return f(*args)
    return call


@quiet
@wrapped
def tile_rows(i):
    return i * 32


@quiet
def remember(x):
    calls.append(x)
    return x


def k(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    shift = lambda r: r  # noqa: E731
    for i in nl.affine_range(4):
        NAME = nl.load(a[shift(tile_rows(i)):tile_rows(i) + 32, :])
        nl.store(out[tile_rows(i):tile_rows(i) + 32, :], nl.multiply(NAME, SCALE))
    return out


def k_mutating(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(4):
        t = nl.load(a[remember(i) * 32:(i + 1) * 32, :])
        nl.store(out[i * 32:(i + 1) * 32, :], t)
    return out
'''


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)
    return module


def _names(compiled) -> set[str]:
    return {d.name for d in compiled.ir.tensors}


def _write(path, text):
    stamp = os.stat(path).st_mtime_ns + 10**9 if path.exists() else None
    path.write_text(text)
    if stamp is not None:  # a new time, as an editor gives it, even within the file system's resolution
        os.utime(path, ns=(stamp, stamp))


def test_decorated_and_lambda_helpers_are_read_from_their_file(tmp_path):
    """A loop body that calls a decorated helper (whose code starts at its first
    decorator's line) and a lambda rolls: both are found in the file and have no
    effects. A decorated helper that appends to a list outside the loop is found
    too, and its effect makes the loop concrete."""
    path = tmp_path / "helpers_kernel.py"
    _write(path, KERNEL.replace("NAME", "tile").replace("SCALE", "2.0"))
    mod = _load(path, "helpers_kernel")
    a = np.random.default_rng(3).standard_normal((128, 8)).astype(np.float32)
    c = nkicc.compile(mod.k, a, cache=False)
    assert c.report["loops"]["concrete"] == 0 and c.report["loops"]["rolled"] >= 1
    np.testing.assert_allclose(c.run(a), a * 2.0, rtol=1e-6)
    m = nkicc.compile(mod.k_mutating, a, cache=False)
    assert m.report["loops"]["concrete"] == 1
    np.testing.assert_array_equal(m.run(a), a)


def test_an_edited_and_reloaded_kernel_is_read_as_it_now_is(tmp_path):
    """Edit the file (lines added above the kernel, a tensor renamed, a constant
    changed) and load it again in the same process: the trace names the tensor
    as the new text does and still finds the loop in it (positions that moved),
    so the loop stays rolled."""
    path = tmp_path / "edited_kernel.py"
    a = np.random.default_rng(4).standard_normal((128, 8)).astype(np.float32)
    _write(path, KERNEL.replace("NAME", "before").replace("SCALE", "2.0"))
    first = nkicc.compile(_load(path, "edited_kernel").k, a, cache=False)
    assert "before" in _names(first)
    _write(path, "# a new first line\n\n\n" + KERNEL.replace("NAME", "after_edit").replace("SCALE", "3.0"))
    second = nkicc.compile(_load(path, "edited_kernel").k, a, cache=False)
    assert "after_edit" in _names(second) and "before" not in _names(second)
    assert second.report["loops"]["concrete"] == 0 and second.report["loops"]["rolled"] >= 1
    np.testing.assert_allclose(second.run(a), a * 3.0, rtol=1e-6)


def test_an_instructions_line_is_its_frames_line_at_every_kind_of_call_site():
    """The tracer's locations come from each code object's line table, decoded once; the
    oracle is the frame's own f_lineno, at call sites inside multi-line expressions,
    comprehensions, conditional expressions, except and with blocks, and at each level."""
    from nkicc.language import tracing
    seen = []

    def probe():
        f = sys._getframe(1)
        while f is not None and len(seen) < 10_000:
            seen.append((tracing._locs(f.f_code, f.f_code.co_filename).get(f.f_lasti), f.f_code.co_filename,
                         f.f_lineno))
            f = f.f_back
        return 1

    def sites():
        a = [probe()
             for _ in range(2)]
        b = (1 +
             probe())
        c = probe() if a else \
            None
        try:
            raise ValueError
        except ValueError:
            d = probe()
        with open(os.devnull) as fh:
            e = {k: probe() for k in
                 range(2) if fh}
        return a, b, c, d, e

    sites()
    assert len(seen) > 20
    assert all(loc is not None and (loc.file, loc.line) == (file, line) for loc, file, line in seen), \
        [s for s in seen if s[0] is None or (s[0].file, s[0].line) != s[1:]]
    assert tracing.user_loc(1).line == sys._getframe().f_lineno
