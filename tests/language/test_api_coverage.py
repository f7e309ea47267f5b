"""nkicc against the committed list of the NKI API reference's names and
signatures (bench/api_reference.json, written by bench/api_coverage.py from the
vendor's stubs). The suite needs no SDK checkout.

While the missing names are being added the coverage only has to not go down:
the floors below are the counts nkicc has reached; raise them as names are
added (the test says when they can be raised). The report (-rP, or -s) lists
what is still missing."""

import pytest

from tests.support.bench import load_bench

# counts nkicc has reached (of 284 names and members): raise, never lower
PRESENT_FLOOR = 284
SIGNATURE_FLOOR = 284
TESTED_FLOOR = 247


def _load():
    return load_bench("api_coverage")


cov = _load()


@pytest.fixture(scope="module")
def rows():
    return cov.check(cov.load_reference(), cov.tested_names())


def test_reference_list_is_whole():
    entries = cov.load_reference()
    assert len(entries) == 284
    assert {e["module"] for e in entries} == {"nki", "nki.language", "nki.isa", "nki.collectives"}
    names = [f"{e['module']}.{e['name']}" for e in entries]
    assert len(set(names)) == len(names)
    # names and signatures only: no documentation text travels with the list
    assert all(set(e) <= {"module", "name", "kind", "params", "value"} for e in entries)


def test_coverage_does_not_go_down(rows):
    present = sum(r.present for r in rows)
    signature = sum(r.present and r.signature in ("yes", "n/a") for r in rows)
    tested = sum(r.tested for r in rows)
    missing: dict[str, list[str]] = {}
    for r in rows:
        if not r.present:
            missing.setdefault(r.module, []).append(r.name)
    print(f"\nNKI API coverage: {present}/{len(rows)} present, {signature} signatures match, {tested} tested")
    for module, names in missing.items():
        print(f"  missing from {module} ({len(names)}): {', '.join(names)}")
    assert present >= PRESENT_FLOOR, f"names went missing: {present} < {PRESENT_FLOOR}"
    assert signature >= SIGNATURE_FLOOR, f"signatures stopped matching: {signature} < {SIGNATURE_FLOOR}"
    assert tested >= TESTED_FLOOR, f"semantics tests lost their api marks: {tested} < {TESTED_FLOOR}"


def test_every_api_mark_names_a_reference_name():
    known = {f"{e['module']}.{e['name']}" for e in cov.load_reference()}
    unknown = sorted(cov.tested_names() - known)
    assert not unknown, f"pytest.mark.api names that are not in the reference: {unknown}"


STUB = '''
from typing import *
from enum import Enum
from other import imported_name
Alias = str
top: Alias = ...
class Colour(Enum):
    red = 1
    blue = 'b'
class Thing:
    size: int = ...
    def __init__(self, a, b=2): ...
    def method(self, x, *rest, key=None, **kw): ...
    @property
    def prop(self): ...
    def _private(self): ...
    alias = ...
class _Hidden:
    field: int = ...
    @property
    def computed(self): ...
hidden: _Hidden = ...
def f(x, y=nl.sbuf, *, z=1.5): ...
def _g(): ...
'''


def test_stub_reader_lists_public_names_with_signatures():
    entries = {e["name"]: e for e in cov.read_stub("m", STUB)}
    assert sorted(entries) == sorted([
        "top", "Colour", "Colour.red", "Colour.blue", "Thing", "Thing.size", "Thing.method", "Thing.prop",
        "Thing.alias", "hidden", "hidden.field", "hidden.computed", "f"])
    assert entries["Colour.blue"] == {"module": "m", "name": "Colour.blue", "kind": "enum value", "value": "b"}
    assert [p["name"] for p in entries["Thing"]["params"]] == ["a", "b"]
    assert [(p["name"], p["kind"], p["default"]) for p in entries["Thing.method"]["params"]] == [
        ("x", "POSITIONAL_OR_KEYWORD", cov.NO_DEFAULT), ("rest", "VAR_POSITIONAL", cov.NO_DEFAULT),
        ("key", "KEYWORD_ONLY", "None"), ("kw", "VAR_KEYWORD", cov.NO_DEFAULT)]
    assert [(p["name"], p["default"]) for p in entries["f"]["params"]] == [
        ("x", cov.NO_DEFAULT), ("y", "nl.sbuf"), ("z", "1.5")]
    assert entries["hidden.computed"]["kind"] == "property"


def test_signature_comparison():
    ref = [{"name": "x", "kind": "POSITIONAL_OR_KEYWORD", "default": cov.NO_DEFAULT},
           {"name": "dtype", "kind": "POSITIONAL_OR_KEYWORD", "default": "None"}]

    def same(x, dtype=None, name=""):
        pass

    def renamed(a, dtype=None):
        pass

    def other_default(x, dtype=1):
        pass

    def extra_required(x, dtype=None, mode=None, *, must):
        pass

    assert cov.compare_signature(ref, same, None) == ""
    assert "no parameter x" in cov.compare_signature(ref, renamed, None)
    assert "reference =None" in cov.compare_signature(ref, other_default, None)
    assert "extra required parameter must" in cov.compare_signature(ref, extra_required, None)

    # a default the stub hides (`...`) matches any default; an ALU operator matches by its name
    import nkicc.language as nl

    class Op:
        _nki_op = "maximum"

    def hidden(x, dtype=Op()):
        pass

    assert cov.compare_signature([ref[0], dict(ref[1], default="...")], hidden, None) == ""
    assert cov.compare_signature([ref[0], dict(ref[1], default="maximum")], hidden, nl) == ""
    assert "reference =minimum" in cov.compare_signature([ref[0], dict(ref[1], default="minimum")], hidden, nl)


def test_script_skips_without_sdk(tmp_path, capsys):
    assert cov.main([]) == 0
    assert "skipped" in capsys.readouterr().out
    assert cov.main([str(tmp_path)]) == 0
    assert "skipped" in capsys.readouterr().out
