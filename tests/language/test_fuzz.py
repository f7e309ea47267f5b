"""Hypothesis fuzzing of kernels built from templates (tests/support/fuzz_kernels.py):
valid ones give rolled == unrolled == numpy, invalid ones an NkiccError with
an expected code at the kernel's line, never an internal error.

CI runs a bounded number of examples per family, derandomised (the same
examples every run, so a failure is reproducible); NKICC_FUZZ_EXAMPLES
raises the count. `python bench/fuzz.py --examples 2000` is the long run with
fresh random examples (docs/reliability.md records it)."""
import os

import pytest
from hypothesis import HealthCheck, given, settings

from tests.support import fuzz_kernels as fk

VALID_EXAMPLES = int(os.environ.get("NKICC_FUZZ_EXAMPLES", "20"))
INVALID_EXAMPLES = int(os.environ.get("NKICC_FUZZ_EXAMPLES", "40"))
HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]


def _settings(examples):
    return settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                    suppress_health_check=HEALTH)


@pytest.mark.parametrize("family", sorted(fk.VALID))
def test_valid_kernels_roll_like_unrolled_and_numpy(family):
    @_settings(VALID_EXAMPLES)
    @given(fk.VALID[family]())
    def prop(case):
        fk.check_valid(case)

    prop()


@pytest.mark.parametrize("family", sorted(fk.INVALID))
def test_invalid_kernels_give_a_diagnostic(family):
    @_settings(INVALID_EXAMPLES)
    @given(fk.INVALID[family]())
    def prop(case):
        fk.check_invalid(case)

    prop()


@pytest.mark.parametrize("family", sorted(fk.ANY))
def test_any_kernel_gives_the_result_or_a_diagnostic(family):
    """Parameters drawn without regard to validity: the numpy result or an
    NkiccError at the kernel's line, nothing else."""
    @_settings(INVALID_EXAMPLES)
    @given(fk.ANY[family]())
    def prop(case):
        fk.check_any(case)

    prop()
