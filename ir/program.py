"""The lowered program: a kernel after the backend passes (on-chip tensors
carry addresses; every op an id, an engine, a DMA queue and the semaphores it
waits on), in a versioned, serialisable form. This is what the cache stores
and the simulator runs."""
from __future__ import annotations

import json

from .errors import NkiccError
from .nodes import Kernel
from .serialize import from_json, to_json

FORMAT = "nkicc-program"
VERSION = 2  # 2: Kernel.views (a returned view of an output)


def program_to_json(kernel: Kernel, target: str) -> dict:
    return {"format": FORMAT, "version": VERSION, "target": target, "kernel": to_json(kernel)}


def program_from_json(data: dict) -> tuple[Kernel, str]:
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise NkiccError("E203", "not an nkicc program file", None, "write one with nkicc compile --emit program")
    if data.get("version") != VERSION:
        raise NkiccError("E203", f"program format version {data.get('version')} (this nkicc reads {VERSION})", None,
                         "recompile the kernel with this nkicc")
    return from_json(data["kernel"]), data["target"]


def dumps_program(kernel: Kernel, target: str) -> str:
    return json.dumps(program_to_json(kernel, target), indent=1)
