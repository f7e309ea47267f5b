"""Whose frame is this (nkicc.ir.origin), through a symlinked install.

A library installed in a venv's site-packages is imported by a path that
differs from the install root by a symlink: either a link placed on sys.path
points into the real site-packages, or the venv's site-packages is itself a
link and the library is imported by its resolved path. The tracer's
locations, the loop-effects proof and the source-level cache key must then
all take the library for a library and the kernel's file for the user's.
(With the tracer's old abspath comparison, the tracer took the library for
the user's code, so an error inside it pointed at the library's line while
the cache key named the same helper by version only.)

Runs in a fresh venv (a subprocess), so nothing is written into the venv the
tests run from; nkicc and its dependencies come from that venv by a .pth.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import textwrap

import pytest

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="symlinks")

LIBRARY = textwrap.dedent('''\
    """A library a kernel calls (installed in site-packages)."""
    import nkicc.language as nl
    from nkicc.language.userframes import caller_loc


    def double(t):
        return nl.add(t, t)


    def bump(seen, t):
        seen.append(1)  # changes a list from outside the loop: the loop cannot roll
        return nl.add(t, t)


    def fail(a):
        raise ValueError("symlib refuses")


    def where():
        return caller_loc()
''')

SCRIPT = textwrap.dedent('''\
    import json, sys
    sys.path.insert(0, sys.argv[1])  # the library, reached by a path the install root does not spell
    import numpy as np
    import nkicc
    import nkicc.language as nl
    from nkicc.ir import NkiccError, origin
    from nkicc.cache.source import fingerprint
    from nkicc.language.loop_effects import EffectChecker
    import symlib


    def clean(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        for i in range(2):
            t = nl.load(a[i * 64:(i + 1) * 64, :])
            nl.store(out[i * 64:(i + 1) * 64, :], symlib.double(t))
        return out


    def carried(a):
        seen = []
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        for i in range(2):
            t = nl.load(a[i * 64:(i + 1) * 64, :])
            nl.store(out[i * 64:(i + 1) * 64, :], symlib.bump(seen, t))
        return out


    def failing(a):
        return symlib.fail(a)  # FAIL


    a = np.random.default_rng(7).standard_normal((128, 64)).astype(np.float32)
    got = {"origin": {"library": origin.origin(symlib.__file__), "script": origin.origin(__file__),
                      "nkicc": origin.origin(nl.__file__)}}
    where = symlib.where()  # WHERE
    got["caller_loc"] = [where.file, where.line]
    try:
        nkicc.compile(failing, a, cache=False)
    except NkiccError as err:
        got["error"] = [err.code, err.loc.file, err.loc.line]
    c = nkicc.compile(clean, a, cache=False)
    np.testing.assert_allclose(c.run(a), 2 * a, rtol=1e-6)
    got["clean"] = [c.report["loops"]["rolled"], c.trace.decisions["concrete"]]
    c = nkicc.compile(carried, a, cache=False)
    np.testing.assert_allclose(c.run(a), 2 * a, rtol=1e-6)
    got["carried"] = [c.report["loops"]["rolled"], list(c.trace.decisions["concrete"].values())]
    got["effects"] = {"symlib.bump": EffectChecker().callable_reason(symlib.bump, 0),
                      "nl.add": EffectChecker().callable_reason(nl.add, 0)}
    what, files = fingerprint(clean, {})
    got["fingerprint_files"] = files
    got["fingerprint"] = json.dumps(what)
    print(json.dumps(got))
''')


def _line(text: str, marker: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if line.rstrip().endswith(marker))


def _venv(tmp_path):
    """A fresh venv (no pip) that sees the test venv's packages by a .pth line."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True, timeout=120).stdout.strip()
    ours = sysconfig.get_paths()["purelib"]
    return python, site, f"import site; site.addsitedir({ours!r})\n"


@pytest.mark.parametrize("layout", ["link-on-sys.path", "site-packages-is-a-link"])
def test_symlinked_library_is_a_library_for_tracer_effects_and_cache(tmp_path, layout):
    python, site, pth = _venv(tmp_path)
    if layout == "link-on-sys.path":
        real = site
        reach = tmp_path / "libs"  # a link to the real site-packages, put on sys.path
        os.symlink(site, reach)
    else:
        real = tmp_path / "store" / "site-packages"  # the venv's site-packages becomes a link to here
        real.parent.mkdir()
        os.rename(site, real)
        os.symlink(real, site)
        reach = real  # imported by its resolved path, which sysconfig does not spell
    with open(os.path.join(real, "zz_test_venv.pth"), "w") as f:
        f.write(pth)
    os.makedirs(os.path.join(real, "symlib"))
    with open(os.path.join(real, "symlib", "__init__.py"), "w") as f:
        f.write(LIBRARY)
    script = tmp_path / "kernels.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    r = subprocess.run([str(python), str(script), str(reach)], capture_output=True, text=True, env=env,
                       cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    symlib_file = os.path.join(str(reach), "symlib", "__init__.py")

    assert got["origin"] == {"library": "library", "script": "user", "nkicc": "nkicc"}
    # the tracer: locations skip the library's frames for the kernel's own line
    assert got["caller_loc"] == [str(script), _line(SCRIPT, "# WHERE")]
    assert got["error"] == ["E001", str(script), _line(SCRIPT, "# FAIL")]
    # the loop-effects proof reads the library's helper (it may change what it is given) and
    # trusts nkicc's own: the clean loop rolls, the one whose helper mutates a list does not
    assert got["effects"]["nl.add"] is None
    assert "bump" in got["effects"]["symlib.bump"]
    if sys.version_info >= (3, 11):  # (3.10's code has no column positions: every loop is concrete)
        assert got["clean"] == [1, {}]
        assert got["carried"][0] == 0 and any("bump" in why for why in got["carried"][1])
    # the cache key: the library's helper by name (not walked), the kernel's file walked
    assert got["fingerprint_files"] == [str(script)]
    assert symlib_file not in got["fingerprint_files"]
    assert '["function", "library", "symlib", "double"' in got["fingerprint"]
