"""Tests of the compile cache (cache/: keys, levels, the store, the shared Redis tier)."""
