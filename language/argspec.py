"""A kernel's tensor argument as nkicc traces it: its shape and dtype
(`TensorSpec`), and the text form `float32[128,512]` that the command line,
string annotations and nki.typing accept."""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..ir import NkiccError
from . import dtypes

# a tensor spec as text: "float32[128,512]"
SPEC = re.compile(r"^\s*([A-Za-z0-9_]+)\s*\[\s*([0-9,\s]*)\]\s*$")


@dataclass(frozen=True)
class TensorSpec:
    """A tensor argument's shape and dtype: what a kernel is traced for."""
    shape: tuple[int, ...]
    dtype: str

    def __str__(self) -> str:
        return f"{self.dtype}[{','.join(map(str, self.shape))}]"

    @staticmethod
    def parse(text: str) -> "TensorSpec":
        m = SPEC.match(text)
        if not m:
            raise NkiccError("E201", f"cannot read tensor spec {text!r}", None, "write DTYPE[D0,D1,...], e.g. float32[128,512]")
        dims = [d for d in m.group(2).replace(" ", "").split(",") if d]
        if not dims or any(int(d) <= 0 for d in dims):
            raise NkiccError("E201", f"tensor spec {text!r} needs positive dimensions", None, "e.g. float32[128,512]")
        return TensorSpec(tuple(int(d) for d in dims), dtypes.dtype_name(m.group(1)))

    @staticmethod
    def of_array(a: np.ndarray) -> "TensorSpec":
        return TensorSpec(tuple(int(d) for d in a.shape), dtypes.dtype_name(a.dtype))
