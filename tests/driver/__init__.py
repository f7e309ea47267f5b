"""Tests of the driver (driver/, package nkicc): the command line, nkicc run, tune, diagnostics of bad
kernels, calling conventions.
"""
