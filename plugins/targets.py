"""The NeuronCore generations nkicc knows (defined in nkicc.ir.target), registered
through the same hook a third-party target plugin uses."""
from nkicc.ir.target import GENERATIONS, TRN1, TRN2, TRN3  # noqa: F401  (nkicc.plugins.targets.TRN2 and so on)
from nkicc.pass_api import hookimpl


@hookimpl
def nkicc_targets():
    return list(GENERATIONS)
