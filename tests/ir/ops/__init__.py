"""Conformance of the instructions (ir/ops/) against numpy on random data."""
