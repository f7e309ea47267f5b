"""docs/migration.md's rule table is the rules module's, and every rule's test exists."""
import ast

from nkicc.migrate_rules import RULES, SECTIONS, TABLE_BEGIN, TABLE_END, render_table
from tests.support.paths import REPO


def test_doc_table_is_the_rules_module():
    doc = (REPO / "docs" / "migration.md").read_text()
    i, j = doc.index(TABLE_BEGIN), doc.index(TABLE_END) + len(TABLE_END)
    assert doc[i:j] == render_table(), "regenerate the table: see docs/migration.md"


def test_every_rule_has_its_test_and_every_unrewritten_rule_says_why():
    tree = ast.parse((REPO / "tests" / "driver" / "test_migrate_rules.py").read_text())
    tests = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    sections = {s for s, *_ in SECTIONS}
    for r in RULES:
        assert r.test.split("::")[1] in tests, r.id
        assert r.section in sections and r.how in ("rewrite", "partial", "flag", "none"), r.id
        assert r.how == "rewrite" or r.why, f"{r.id} is not (always) rewritten and does not say why"
    assert len({r.id for r in RULES}) == len(RULES)
    assert all(any(r.section == s for r in RULES) for s in sections)
