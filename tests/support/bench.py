"""The bench/ scripts, loaded for their tests. bench/ is not a package and its
scripts import each other by name (benchenv, conformance_refs, fidelity_kernels),
so bench/ goes on sys.path and each module is registered under its own name."""
import importlib.util
import sys
from types import ModuleType

from tests.support.paths import BENCH


def load_bench(name: str) -> ModuleType:
    """bench/NAME.py as module NAME, loaded once."""
    if name in sys.modules:
        return sys.modules[name]
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while a class is made
    spec.loader.exec_module(module)
    return module
