"""Test targets small enough that the scaled seed kernels must spill."""
from nkicc.pass_api import Target, hookimpl

TINY = Target("tiny", sbuf_partition_bytes=8 * 1024, psum_partition_bytes=4 * 1024, description="test only")
TINY_PSUM = Target("tiny-psum", sbuf_partition_bytes=192 * 1024, psum_partition_bytes=2 * 1024 + 512,
                   description="test only: PSUM of one bank and a quarter", nc_version=4)


@hookimpl
def nkicc_targets():
    return [TINY, TINY_PSUM]
