"""Find kernels named on the command line (`FILE::KERNEL`) and make `import
nki` work for scripts written for NKI."""
from __future__ import annotations

import ast
import difflib
import importlib.util
import os
import sys
import types

from .api import JitKernel
from .ir import Loc, NkiccError
from .language.kernel_trace import inspect_unwrap
from .language.usererrors import user_error
from .language.userframes import _user_frame
from .specs import TensorSpec, annotated_specs, parameters

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
        raise NkiccError("E001", f"SyntaxError: {exc.msg}", Loc(path, exc.lineno or 0), "fix the kernel file") from None
    except Exception as exc:
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


def parse_pairs(items: list[str], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        if "=" not in item:
            raise NkiccError("E201", f"{what} {item!r} is not NAME=VALUE", None, f"write {what} NAME=VALUE")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def const_value(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def resolve_kernel(target: str, args: list[str], consts: list[str], from_inputs: dict | None = None):
    """Load FILE::KERNEL and split its parameters into tensor specs and constants.
    `from_inputs`: specs of the arrays of an --inputs FILE.npz, used for
    parameters with neither --arg nor an annotation."""
    kernel = load_kernel(target)
    fn = inspect_unwrap(getattr(kernel, "fn", kernel))
    given = {k: TensorSpec.parse(v) for k, v in parse_pairs(args, "--arg").items()}
    constants = {k: const_value(v) for k, v in parse_pairs(consts, "--const").items()}
    defaults = annotated_specs(fn)
    params = parameters(fn)
    names = {p.name for p in params}
    for k in list(given) + list(constants):
        if k not in names:
            raise NkiccError("E201", f"kernel {fn.__name__} has no parameter {k!r}", None,
                             f"its parameters are {', '.join(names)}")
    specs: dict[str, TensorSpec] = {}
    missing = []
    for p in params:
        if p.name in given:
            specs[p.name] = given[p.name]
        elif p.name in constants:
            continue
        elif p.name in defaults:
            specs[p.name] = defaults[p.name]
        elif from_inputs and p.name in from_inputs:
            specs[p.name] = from_inputs[p.name]
        elif p.default is p.empty:
            missing.append(p.name)
    if missing:
        raise NkiccError("E201", f"kernel {fn.__name__} needs a spec for {', '.join(missing)}", None,
                         "add --arg NAME=DTYPE[D0,D1,...] (tensors) or --const NAME=VALUE")
    return fn, specs, constants
