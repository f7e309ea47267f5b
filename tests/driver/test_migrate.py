"""`nkicc migrate` as a whole: comments and formatting survive, a second run
changes nothing, --write replaces the file, --check can fail, and bad input is
one line."""
from __future__ import annotations

import dataclasses
import os
import textwrap

import libcst as cst
import pytest

from nkicc.ir import NkiccError
from nkicc.migrate import check, migrate_file, migrate_source, nki_names, write_atomically
from tests.support.cli import run_cli, run_in_process



COMMENTED = textwrap.dedent('''\
    """A 0.1 kernel with comments in every corner."""
    import neuronxcc.nki as nki            # the package
    import neuronxcc.nki.language as nl
    import neuronxcc.nki.isa as nisa


    # --- the kernel ---
    @nki.jit(mode="simulation")   # decorated
    def scale(a,    b):   # odd spacing stays
        """Docstring."""
        out = nl.ndarray(a.shape, dtype=a.dtype,
                         buffer=nl.shared_hbm)   # a wrapped call
        # the grid
        i_p, i_f = nl.mgrid[0:128, 0:64]  # 128 x 64

        for i in nl.affine_range(2):   # two tiles
            x = nl.load(a[i * 128 + i_p, i_f])  # load
            # a comment between statements
            y = nisa.tensor_tensor(x, x, op=nl.multiply)   # square
            nl.store(out[i * 128 + i_p, i_f], value=y)
        return out  # done
    ''')


def comments(text: str) -> list[str]:
    out = []
    for line in text.splitlines():
        if "#" in line:
            out.append(line[line.index("#"):].strip())
    return out


def test_round_trip_keeps_comments_and_formatting():
    m = migrate_source(COMMENTED, "k.py")
    assert [c for c in comments(m.after) if not c.startswith("# nkicc-migrate")] == comments(COMMENTED)
    cst.parse_module(m.after)
    assert "def scale(a,    b):   # odd spacing stays" in m.after
    assert '    out = nl.ndarray(a.shape, dtype=a.dtype,\n                     buffer=nl.shared_hbm)   # a wrapped call' \
        in m.after
    assert "x = nl.load(a[i * 128:i * 128 + 128, 0:64])  # load" in m.after
    assert "nl.mgrid" not in m.after and "neuronxcc" not in m.after and m.notes == []
    # a file no rule touches comes back byte for byte
    same = migrate_source(m.after, "k.py", "0.5")
    assert same.after == m.after and not same.changed and same.diff() == ""


def test_an_nki_file_keeps_its_imports_and_a_contradicting_from_is_noted():
    src = "import nki as nki\nimport nki.language as nl\n\n\n@nki.jit\ndef k(a):\n    return a\n"
    assert migrate_source(src, "k.py", "0.3").after == src
    m = migrate_source(src.replace("import nki as nki", "import neuronxcc.nki as nki"), "k.py", "0.3")
    assert m.infos == ["k.py: note: it imports neuronxcc.nki (NKI 0.1), yet --from 0.3: the rules of the sections "
                       "before 0.3 are not applied"]


def test_second_run_changes_nothing():
    src = COMMENTED.replace("x, x, op", "x, nisa.iota(x), op")  # an ISA call it must leave a comment on
    once = migrate_source(src, "k.py")
    assert once.notes, "expected a comment for the nested ISA call"
    twice = migrate_source(once.after, "k.py", "0.2")
    assert twice.after == once.after
    assert [n.rule for n in twice.notes] == [n.rule for n in once.notes]


def test_notes_name_the_line_they_stand_above():
    m = migrate_source(COMMENTED.replace("x, x, op", "x, nisa.iota(x), op"), "k.py")
    lines = m.after.splitlines()
    for n in m.notes:
        assert lines[n.line - 2].strip().startswith(f"# nkicc-migrate: {n.rule}")
        assert f"warning[{n.rule}]" in n.warning("k.py") and n.warning("k.py").startswith(f"k.py:{n.line}:")


def test_write_replaces_the_file_atomically(tmp_path):
    path = tmp_path / "k.py"
    path.write_text(COMMENTED)
    os.chmod(path, 0o640)
    m = migrate_file(str(path))
    write_atomically(str(path), m.after)
    assert path.read_text() == m.after and (os.stat(path).st_mode & 0o777) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.py"]  # no temporary left behind


def test_cli_write_and_diff(tmp_path):
    path = tmp_path / "k.py"
    path.write_text(COMMENTED)
    r = run_cli("migrate", str(path))
    assert r.returncode == 0 and r.stdout.startswith("--- a/k.py\n+++ b/k.py\n") and path.read_text() == COMMENTED
    assert r.stderr.splitlines()[0] == f"nkicc migrate: {path}: NKI 0.1 -> 0.6 (from its neuronxcc.nki imports)"
    r = run_cli("migrate", str(path), "--write")
    assert r.returncode == 0 and r.stdout == "" and "neuronxcc" not in path.read_text()


def test_check_fails_when_the_rewrite_changes_the_meaning(tmp_path):
    src = textwrap.dedent('''\
        import nki
        import nki.language as nl
        import nki.isa as nisa


        @nki.jit(mode="simulation")
        def k(a):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a)
            nisa.tensor_scalar(t, t, nl.multiply, 2.0)
            nisa.dma_copy(dst=out, src=t)
            return out
        ''')
    path = tmp_path / "k.py"
    path.write_text(src)
    m = migrate_file(str(path), "0.2")
    assert check(m, args=["a=float32[128,32]"]).outputs == 1
    wrong = dataclasses.replace(m, after=m.after.replace("2.0", "2.001"))
    with pytest.raises(NkiccError) as e:
        check(wrong, args=["a=float32[128,32]"])
    assert e.value.code == "E215" and "differs from the original" in e.value.message
    r = run_cli("migrate", str(path), "--from", "0.2", "--check", "--arg", "a=float32[128,32]")
    assert r.returncode == 0 and "equal the original's, exactly" in r.stderr


@pytest.mark.parametrize("args, code, text", [
    (["nope.py"], "E200", "no such kernel file"),
    (["{bad}"], "E001", "cannot parse bad.py"),
    (["{plain}"], "E200", "imports no NKI module"),
    (["{nokernel}"], "E200", "has no kernel"),
    (["{good}", "--from", "0.9"], "E201", "unknown NKI version --from 0.9"),
    (["{good}", "--to", "7"], "E201", "unknown NKI version --to 7"),
    (["{good}", "--from", "0.5", "--to", "0.3"], "E201", "newer than --to"),
    (["{good}", "--diff", "--write"], "E201", "exclude each other"),
])
def test_bad_input_is_one_line(tmp_path, capsys, monkeypatch, args, code, text):
    files = {"bad": "import nki\ndef k(:\n", "plain": "import numpy\n", "nokernel": "import nki\n\ndef f():\n    pass\n",
             "good": "import nki\n\n@nki.jit\ndef k(a):\n    return a\n"}
    for name, body in files.items():
        (tmp_path / f"{name}.py").write_text(body)
    monkeypatch.chdir(tmp_path)
    rc, _, err = run_in_process(capsys, "migrate", *[a.format(**{n: str(tmp_path / f"{n}.py") for n in files}) for a in args])
    lines = err.strip().splitlines()
    assert rc == 1 and len(lines) == 1 and lines[0].startswith(f"error[{code}]") and text in lines[0], err
    if code == "E001":
        assert "bad.py:2:" in lines[0]


def test_nki_names_of_kernel_code_leave_the_script_out():
    src = COMMENTED + "\n\ndef bench(x):\n    return nki.benchmark(scale, warmup=1)(x, x)\n"
    assert "nki.benchmark" in nki_names(src) and "nki.benchmark" not in nki_names(src, kernel_code=True)
    assert "nki.language.mgrid" in nki_names(src, kernel_code=True)
    nested = "import nki\nimport nki.language as nl\n\n@nki.jit\ndef k(a):\n    def body(i):\n        nl.exp(a)\n"
    assert nki_names(nested, kernel_code=True) == {"nki.jit", "nki.language.exp"}


def test_nki_names_are_canonical_and_whole():
    m = migrate_source(COMMENTED, "k.py")
    assert nki_names(COMMENTED) >= {"nki.language.mgrid", "nki.isa.tensor_tensor", "nki.jit"}
    assert nki_names(m.after) == {"nki.jit", "nki.language.ndarray", "nki.language.shared_hbm",
                                  "nki.language.affine_range", "nki.language.load", "nki.language.sbuf",
                                  "nki.isa.tensor_tensor", "nki.language.multiply", "nki.language.store"}
