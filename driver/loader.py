"""Find kernels named on the command line (`FILE::KERNEL`) and make `import
nki` work for scripts written for NKI."""
from __future__ import annotations

import difflib
import importlib.util
import os
import sys
import types

from .ir import NkiccError

_ALIAS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_nki_alias")


def enable_nki_alias() -> bool:
    """Let `import nki` resolve to nkicc unless a real nki is importable.
    Returns whether the alias is in use."""
    if "nki" in sys.modules:
        return getattr(sys.modules["nki"], "__file__", "").startswith(_ALIAS_DIR)
    if _ALIAS_DIR not in sys.path:
        if importlib.util.find_spec("nki") is not None:
            return False
        sys.path.append(_ALIAS_DIR)
    return True


def load_module(path: str) -> types.ModuleType:
    if not os.path.isfile(path):
        raise NkiccError("E200", f"no such kernel file: {path}", None, "give the path to a .py file")
    enable_nki_alias()
    path = os.path.abspath(path)
    folder = os.path.dirname(path)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    name = "nkicc_kernel_" + os.path.splitext(os.path.basename(path))[0].replace("-", "_")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except NkiccError:
        raise
    except SyntaxError as exc:
        from .ir import Loc
        raise NkiccError("E001", f"SyntaxError: {exc.msg}", Loc(path, exc.lineno or 0), "fix the kernel file") from None
    except Exception as exc:
        from .trace import _user_frame
        from .usererrors import user_error
        err = user_error(exc)
        if err is not None:
            raise err from None
        raise NkiccError("E001", f"{type(exc).__name__} while importing {os.path.basename(path)}: {exc}",
                         _user_frame(exc.__traceback__), "fix the kernel file") from None
    return module


def load_kernel(target: str):
    """`path/to/file.py::kernel` -> the kernel object; `path/to/file.py` when
    the file defines exactly one `@nkicc.jit` kernel."""
    if "::" not in target:
        return _only_kernel(target, load_module(target))
    path, name = target.rsplit("::", 1)
    module = load_module(path)
    if not hasattr(module, name):
        candidates = [k for k, v in vars(module).items() if callable(v) and not k.startswith("_")]
        near = difflib.get_close_matches(name, candidates, n=1)
        hint = f"did you mean {near[0]}?" if near else f"kernels in the file: {', '.join(candidates) or 'none'}"
        raise NkiccError("E200", f"{path} has no kernel named {name!r}", None, hint)
    return getattr(module, name)


def _only_kernel(path: str, module: types.ModuleType):
    from .api import JitKernel

    # kernels defined in the file itself, not ones it imported
    kernels = {k: v for k, v in vars(module).items()
               if isinstance(v, JitKernel) and getattr(v.fn, "__module__", None) == module.__name__}
    if len(kernels) == 1:
        return next(iter(kernels.values()))
    if not kernels:
        raise NkiccError("E200", f"{path} has no @nkicc.jit kernel", None,
                         "write FILE.py::KERNEL to name a plain function, or decorate the kernel with @nkicc.jit")
    raise NkiccError("E200", f"{path} holds {len(kernels)} kernels", None,
                     f"write {path}::KERNEL, KERNEL one of {', '.join(kernels)}")
