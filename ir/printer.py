"""Stable text form of the IR, used by --print-ir and as the basis of hashing."""
from __future__ import annotations

from .nodes import Access, Alloc, Block, Kernel, Loop, Op


def _fmt_attr(value: object) -> str:
    if isinstance(value, float):
        return repr(value)
    return str(value)


def format_op(op: Op, with_loc: bool = True) -> str:
    outs = ", ".join(str(a) for a in op.outs)
    ins = ", ".join(str(a) for a in op.ins)
    attrs = "".join(f" {k}={_fmt_attr(v)}" for k, v in op.attrs)
    text = f"{op.opcode} {outs} <- {ins}{attrs}" if outs else f"{op.opcode} {ins}{attrs}"
    if with_loc and op.loc is not None:
        text += f"  # {op.loc}"
    return text


def format_block(block: Block, indent: int = 1, with_loc: bool = True) -> list[str]:
    pad = "  " * indent
    lines: list[str] = []
    for s in block.stmts:
        if isinstance(s, Op):
            lines.append(pad + format_op(s, with_loc))
        elif isinstance(s, Alloc):
            lines.append(f"{pad}alloc {s.tensor}")
        elif isinstance(s, Loop):
            head = f"{pad}for {s.var} in {s.kind}[0, {s.trip})"
            if (s.start, s.step) != (0, 1):
                head += f" index={s.start}+{s.step}*{s.var}"
            if with_loc and s.loc is not None:
                head += f"  # {s.loc}"
            lines.append(head + " {")
            lines.extend(format_block(s.body, indent + 1, with_loc))
            lines.append(pad + "}")
    return lines


def format_kernel(kernel: Kernel, with_loc: bool = True) -> str:
    outs = [o if kernel.view(i) is None else f"{o} as {_view(kernel.view(i))}" for i, o in enumerate(kernel.outputs)]
    lines = [f"kernel {kernel.name}({', '.join(kernel.args)}) -> ({', '.join(outs)})"]
    for t in kernel.tensors:
        shape = ",".join(str(d) for d in t.shape)
        at = f" @{t.address}" if t.address is not None else ""
        lines.append(f"  tensor {t.name}: {t.dtype}[{shape}] {t.buffer}{at} {t.role}")
    lines.extend(format_block(kernel.body, 1, with_loc))
    return "\n".join(lines) + "\n"


def _view(v) -> str:
    pat = ",".join(f"[{s},{n}]" for s, n in v.pattern)
    return f"@({v.offset}){{{pat}}}" + (f" as {v.dtype}" if v.dtype else "")


def format_access(access: Access) -> str:
    return str(access)
