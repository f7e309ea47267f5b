"""What a kernel call hands back: each output as the kernel's `return` names it.

The simulators compute every output tensor whole, by name. A kernel that
returns a view of one (`out.reshape(...)`, `out.ap(...)`, `out[a:b]`) gives the
caller that view's elements in that view's shape (`Kernel.views`), as a new
array: two views of one tensor never alias each other or the simulator's memory.
"""
from __future__ import annotations

import numpy as np

from ..ir import Kernel, NkiccError, dtypes


def returned(kernel: Kernel, i: int, base: np.ndarray) -> np.ndarray:
    """Output i of `kernel` as returned, from the whole tensor `base`."""
    view = kernel.view(i)
    if view is None:
        return base
    flat = np.ascontiguousarray(base).reshape(-1)
    if view.dtype is not None:
        decl = kernel.tensor(kernel.outputs[i])
        if flat.dtype != dtypes.storage(decl.dtype, True):
            raise NkiccError("E160", f"the kernel returns {decl.name} as {view.dtype}: reinterpreting bytes needs "
                                     "each dtype held as itself", kernel.loc, "run with NKI_PRECISE_FP=1 (the default)")
        flat = flat.view(dtypes.storage(view.dtype, True))
    index = np.full(view.shape, view.offset, dtype=np.int64)
    for axis, (step, num) in enumerate(view.pattern):
        index += (np.arange(num, dtype=np.int64) * step).reshape((num,) + (1,) * (len(view.pattern) - axis - 1))
    return flat[index]  # (a new array)


def returned_values(kernel: Kernel, values: list) -> list:
    """`values` (one whole tensor per output, in order) as the kernel returns them."""
    return [returned(kernel, i, v) for i, v in enumerate(values)]
