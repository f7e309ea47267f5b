"""unroll: full unrolling of static loops, the vendor compiler's behaviour.

Off by default and opt-in: its output grows with the product of the trip
counts (about 4.5 million instructions for seed_mm2_static.py). It reports
progress and stops under the compile budget instead of exhausting the
machine. Dynamic (hardware) loops stay loops; their bodies are unrolled.
"""
import dataclasses

from nkicc.ir import Alloc, Block, Op, count_instructions
from nkicc.ir.rewrite import bind_op
from nkicc.pass_api import Pass, hookimpl

_CHECK_EVERY = 2048


def unroll(kernel, ctx):
    total = count_instructions(kernel).unrolled
    done = 0

    def expand(block: Block, values: dict, out: list) -> None:
        nonlocal done
        for s in block.stmts:
            if isinstance(s, Op):
                out.append(bind_op(s, values) if values else s)
                done += 1
                if done % _CHECK_EVERY == 0:
                    ctx.progress(done, total)
            elif isinstance(s, Alloc):
                out.append(s)
            elif s.kind == "dynamic":
                body: list = []
                expand(s.body, values, body)
                out.append(dataclasses.replace(s, body=Block(tuple(body))))
            else:
                inner = dict(values)
                for t in range(s.trip):
                    inner[s.var] = t
                    expand(s.body, inner, out)

    out: list = []
    expand(kernel.body, {}, out)
    ctx.progress(done, total)
    return dataclasses.replace(kernel, body=Block(tuple(out)))


@hookimpl
def nkicc_passes():
    return [Pass("unroll", unroll, "fully unroll static loops (the vendor behaviour; for comparison)",
                 default=False, scope="kernel", cost="unrolled", after=("dce",))]
