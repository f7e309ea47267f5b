"""Tests of nkicc.language: tracing, rolling (tricky loops, loop effects), views, nl functions and the
NKI API surface.
"""
