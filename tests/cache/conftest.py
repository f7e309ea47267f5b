"""Fixtures of the cache tests."""
import pytest

from nkicc.cache.store import forget_stores


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A fresh cache folder of this test's own, with none of the user's cache settings."""
    d = tmp_path / "nkicc-cache"
    monkeypatch.setenv("NKICC_CACHE_DIR", str(d))
    monkeypatch.delenv("NKICC_CACHE", raising=False)
    monkeypatch.delenv("NKICC_CACHE_SIZE", raising=False)
    forget_stores()
    yield d
    forget_stores()
