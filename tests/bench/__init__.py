"""Tests of the bench/ scripts that run without long runs."""
