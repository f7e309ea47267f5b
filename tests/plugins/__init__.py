"""Tests of the pass manager and the built-in passes (plugins/): alloc, schedule, multi-buffer, the others."""
