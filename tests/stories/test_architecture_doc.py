"""docs/architecture.md describes the layout file by file: every module of
every package is named there, so a new module without a line fails here."""
from __future__ import annotations

import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ("ir", "ir/ops", "language", "language/isa", "simulator", "cache", "plugins", "driver")


def _modules() -> list[pathlib.Path]:
    return [f for d in PACKAGES for f in sorted((REPO / d).glob("*.py")) if f.name != "__init__.py"]


@pytest.mark.parametrize("module", _modules(), ids=lambda f: str(f.relative_to(REPO)))
def test_every_module_has_its_line_in_the_architecture_doc(module):
    doc = (REPO / "docs" / "architecture.md").read_text()
    assert module.name in doc or f"`{module.stem}`" in doc, (
        f"{module.relative_to(REPO)} is not described in docs/architecture.md's layout")

