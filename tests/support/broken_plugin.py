"""A deliberately broken pass for tests: it drops the last instruction of the
kernel (inside the last loop, if the body ends in one). --verify-each must
catch it and name it."""
import dataclasses

from nkicc.ir import Block, Loop, Op
from nkicc.pass_api import Pass, hookimpl


def _drop_last(block: Block) -> Block:
    stmts = list(block.stmts)
    for i in range(len(stmts) - 1, -1, -1):
        if isinstance(stmts[i], Op):
            del stmts[i]
            break
        if isinstance(stmts[i], Loop):
            stmts[i] = dataclasses.replace(stmts[i], body=_drop_last(stmts[i].body))
            break
    return Block(tuple(stmts))


def drop_last(kernel, ctx):
    return dataclasses.replace(kernel, body=_drop_last(kernel.body))


@hookimpl
def nkicc_passes():
    return [Pass("drop-last", drop_last, "drops an instruction (test only)", default=False), CRASH]


def crash(kernel, ctx):
    raise ZeroDivisionError("the test plugin divides by zero")


CRASH = Pass("crash", crash, "raises (test only)", default=False)
