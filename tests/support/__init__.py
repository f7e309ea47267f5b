"""Helpers, kernels and plugins that tests in several folders import (tests import them from here,
never from conftest).
"""
