"""A region pass that costs 10 ms per body and changes nothing: a stand-in
for an expensive region pass (tests/cache/test_cache_levels.py). It counts the
bodies it really ran on, so a test can see which ones the cache served."""
import time

from nkicc.pass_api import Pass, hookimpl

SECONDS = 0.01
RUNS = []  # one entry per body the pass ran on (this process)


def slow_identity(block, region, ctx):
    RUNS.append(len(block.stmts))
    time.sleep(SECONDS)
    return block


@hookimpl
def nkicc_passes():
    return [Pass("slow-identity", slow_identity, "test only: 10 ms per body, no change", scope="region",
                 after=("simplify",), before=("verify",))]
