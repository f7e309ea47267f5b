"""The NeuronCore generations nkicc knows."""
from nkicc.pass_api import Target, hookimpl

TRN1 = Target("trn1", sbuf_partition_bytes=192 * 1024, pe_ghz=2.8, dve_ghz=1.12, act_ghz=1.4, pool_ghz=1.4,
              description="NeuronCore-v2 (Trainium1)", nc_version=2)
TRN2 = Target("trn2", sbuf_partition_bytes=224 * 1024, pe_ghz=2.4, dve_ghz=0.96, act_ghz=1.2, pool_ghz=1.2,
              description="NeuronCore-v3 (Trainium2)")
TRN3 = Target("trn3", sbuf_partition_bytes=256 * 1024, pe_ghz=2.4, dve_ghz=1.2, act_ghz=1.2, pool_ghz=1.2,
              description="NeuronCore-v4 (Trainium3)", nc_version=4)


@hookimpl
def nkicc_targets():
    return [TRN1, TRN2, TRN3]
