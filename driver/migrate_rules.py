"""The rules of the vendor's NKI migration guide, one record each, and the
table of docs/migration.md made from them.

Each rule names the guide's section and heading it comes from, what
`nkicc migrate` does about it, and the test that checks that. `how` is one of
  rewrite  the source is rewritten, always;
  partial  the common forms are rewritten, the rest get a `# nkicc-migrate:` comment;
  flag     every occurrence gets a `# nkicc-migrate:` comment (the rewrite needs
           what only the trace knows: shapes, dtypes, buffers, liveness);
  none     the rule asks for no change to the source (a behaviour fix, a default,
           a notice); `why` says so.
The rewrites themselves are in migrate_cst.py, keyed by rule id.
"""
from __future__ import annotations

from dataclasses import dataclass

VERSIONS = ("0.1", "0.2", "0.3", "0.4", "0.5", "0.6")
# guide sections in the order they apply: (id, from, to, title)
SECTIONS = (
    ("0.1-0.2", "0.1", "0.2", "Migrating from NKI 0.1.0 to NKI 0.2.0"),
    ("blockdim", "0.1", "0.2", "Removing block dimensions from NKI kernels"),
    ("0.2-0.3", "0.2", "0.3", "Migrating from NKI 0.2.0 to NKI 0.3.0"),
    ("0.3-0.4", "0.3", "0.4", "Migrating from NKI 0.3.0 to NKI 0.4.0"),
    ("0.4-0.5", "0.4", "0.5", "Migrating from NKI 0.4.0 to NKI 0.5.0"),
    ("0.5-0.6", "0.5", "0.6", "Migrating from NKI 0.5.0 to NKI 0.6.0"),
)
TEST_FILE = "tests/driver/test_migrate_rules.py"


@dataclass(frozen=True)
class Rule:
    id: str           # e.g. "M0203"; the `# nkicc-migrate:` comments and warnings name it
    section: str      # a SECTIONS id
    heading: str      # the guide's heading (or list item) the rule comes from
    how: str          # rewrite | partial | flag | none
    rewrite: str      # what nkicc does
    why: str = ""     # for partial/flag/none: what it leaves to the author, and why
    numerics: bool = False  # a documented numerics change: --check allows the output dtype's rounding
    #                         (a "none" rule whenever it lies in range; another rule when it rewrote something)

    @property
    def test(self) -> str:
        return f"{TEST_FILE}::test_{self.id.lower()}"


R = Rule
RULES: tuple[Rule, ...] = (
    # --- 0.1 -> 0.2 -------------------------------------------------------------
    R("M0201", "0.1-0.2", "New namespace, new APIs (neuronxcc.nki -> nki)", "rewrite",
      "every `neuronxcc.nki...` import becomes the same `nki...` import, aliases kept"),
    R("M0202", "0.1-0.2", "All ISA functions require a destination parameter", "partial",
      "`t[...] = nisa.f(...)` becomes `nisa.f(t[...], ...)`; `t[...] += nisa.nc_matmul(...)` adds "
      "`accumulate=True`; `x = nisa.f(...)` for an element-wise instruction declares `x` with the shape and "
      "dtype of its data operand (nc_matmul: float32 PSUM, stationary.shape[1] x moving.shape[1]; "
      "nc_transpose: the data's shape reversed) and passes it as `dst`",
      "other result shapes (reductions, iota, selects) are the trace's to know: those calls get a comment"),
    R("M0215", "0.1-0.2", "All ISA functions require a destination parameter (writing a tile by assignment)",
      "partial",
      "`t[...] = nl.load(x)` becomes `nisa.dma_copy(dst=t[...], src=x)`; `t[...] = 0` becomes `nisa.memset`; "
      "`t[...] = value` becomes `nisa.tensor_copy(dst=t[...], src=value)`; `t[...] += nl.matmul(x, y, "
      "transpose_x=True)` becomes `nisa.nc_matmul(t[...], x, y, accumulate=True)`; `t[...] += / -= / *= v` "
      "becomes `nisa.tensor_tensor(dst=t[...], data1=t[...], data2=v, op=nl.add / subtract / multiply)`",
      "other in-place operators (`/=`, `**=` ...) get a comment; `tiles[i] = ...` on a Python list stays. "
      "The matmul form accumulates in PSUM as the 0.3 guide documents (M0325), rounding once per partial "
      "sum: --check allows the dtype's rounding when it was made", numerics=True),
    R("M0203", "0.1-0.2", "Update indexing syntax for mgrid and arange", "partial",
      "an index `E + i` with `i` from `nl.mgrid[lo:hi, ...]`, `nl.arange(n)[:, None]` or `grid.p/.x` "
      "becomes the slice `E+lo:E+hi`; a scalar beside grid indices becomes `e:e+1` (the rank stays); an "
      "index that is linear in the grid's axes, each used once (`t[i_p, c*i_1 + i_2]`, a transpose "
      "`t[i_f, i_p]`), becomes `t.ap(pattern=[[step, num], ...], offset=...)`, one pair per grid axis; the "
      "grid's definition goes once nothing uses it",
      "a grid axis used twice or not at all, or non-linearly (`i*i`), and grids in a mask the statement "
      "does not bound, get a comment"),
    R("M0204", "0.1-0.2", "Deprecation of masking", "partial",
      "`mask=(E + i < B) & ...` whose terms bound the statement's own grid indices becomes slices that "
      "stop at `min(B, E+hi)`; `t[...] = nl.OP(a, b, mask=(E + i_p < B))`, OP element-wise and i_p a "
      "partition index from 0, computes rows `0:min(B - E, n)` of the whole tiles t, a, b; the mask goes",
      "any other mask (a non-element-wise operation, several bounds on whole tiles) changes which elements "
      "are written in a way the text does not show: left with a comment"),
    R("M0205", "0.1-0.2", "Nested slicing is not available", "flag",
      "`t[a:b][c:d]` (two subscripts with slices) gets a comment",
      "the combined slice depends on the first one's shape; a list of tiles indexed then sliced is legal"),
    R("M0206", "0.1-0.2", "Dynamic access pattern", "flag",
      "an index that is itself a loaded tensor gets a comment",
      "the `.ap(pattern, scalar_offset=, indirect_dim=)` form needs the base tensor's strides"),
    R("M0207", "0.1-0.2", "Remove nki.jit decorator on sub-kernels", "rewrite",
      "`@nki.jit` on a function that another kernel of the file calls is removed"),
    R("M0208", "0.1-0.2", "Dictionaries support only string keys", "flag",
      "a dict display with a non-string literal key inside a kernel gets a comment",
      "renaming keys changes every lookup, including computed ones"),
    R("M0209", "0.1-0.2", "Consistent control flow behavior", "none", "",
      "the new semantics are Python's; a 0.1 kernel that relied on a loop body running once differs, "
      "and --check shows it"),
    R("M0210", "0.1-0.2", "Improved allocation API / Translate from the NKI 0.1.0 direct allocation API", "flag",
      "`nki.compiler` allocators (`sbuf.mod_alloc`, `psum.alloc`, ...) get a comment",
      "the `address=` of each block is a layout decision the guide leaves to the author"),
    R("M0211", "0.1-0.2", "nl.load / nl.store removed in 0.2, reintroduced in 0.3", "none", "",
      "they exist from 0.3 on, so a migration to 0.3 or later keeps them; one to exactly 0.2 flags them"),
    R("M0212", "0.1-0.2", "Dynamic control flow (registers, nl.dynamic_range, while)", "none", "",
      "new in 0.2; 0.1 kernels have no such loops"),
    R("M0213", "0.1-0.2", "0.1 runtime entry points: nki.baremetal, nki.benchmark, nki.simulate_kernel", "partial",
      "`@nki.baremetal(...)` becomes `@nki.jit`; `nki.simulate_kernel(k, *a)` becomes `nki.simulate(k)(*a)`",
      "`nki.benchmark` has no 0.6 counterpart (profiling is a tool, not an API): left with a comment"),
    R("M0214", "0.1-0.2", "0.1 reductions over loops: nl.loop_reduce", "flag",
      "`nl.loop_reduce` gets a comment",
      "0.6 writes the accumulation into an SBUF tile in the loop body; its shape is the trace's"),
    R("M0216", "0.1-0.2", "0.1 dtype limits: nl.fp32.min (and .max)", "rewrite",
      "`nl.fp32.min` / `.max` become the float32 limits as literals (-3.4028234663852886e+38 / "
      "3.4028234663852886e+38); 0.6 has no `nl.fp32`"),
    R("M0217", "0.1-0.2", "0.1 reductions keep the partition: a (P, F) tile reduced over F is (P, 1)", "partial",
      "`nl.sum(x, axis=[1])` (and max, min, mean, prod, var) gets `keepdims=x.ndim == 2` (1 + the number of axes "
      "reduced): kept exactly where the reduction covers every free axis, as 0.1 kept it",
      "an axis that is not a literal gets a comment"),
    # --- block dimensions ---------------------------------------------------------
    R("M0251", "blockdim", "What are block dimensions? (a leading nl.par_dim)", "rewrite",
      "`nl.par_dim(P)` as the first dimension of a shape becomes `P`"),
    R("M0252", "blockdim", "Use a Python-like list", "partial",
      "`t = nl.ndarray((B, nl.par_dim(P), F...), ...)` becomes `[nl.ndarray((P, F...), ...) for _ in range(B)]` "
      "(nested for several block dimensions) and `t[b, ...]` becomes `t[b][...]`; the guide says the program "
      "is the same",
      "a block dimension used whole or sliced (`t[0:2]`, `t` passed on) needs the author's choice between "
      "the list and folding the blocks into the free dimension"),
    R("M0253", "blockdim", "Use a differently-shaped tensor (fold into the free dimension / hoist into the loop)",
      "none", "", "an alternative to M0252 that depends on which blocks are alive together; M0252's list is "
      "always correct"),
    # --- 0.2 -> 0.3 -------------------------------------------------------------
    R("M0301", "0.2-0.3", "NKI CPU Simulator (nki.simulate)", "rewrite",
      "`nki.simulate_kernel(k, *a)` becomes `nki.simulate(k)(*a)`"),
    R("M0302", "0.2-0.3", "nki.isa.tensor_copy_dynamic_src / tensor_copy_dynamic_dst", "flag",
      "every call gets a comment", "the `.ap(..., scalar_offset=)` replacement needs the tensor's strides"),
    R("M0303", "0.2-0.3", "nki.jit(platform_target=...)", "rewrite",
      "the argument goes; the warning says to set NEURON_PLATFORM_TARGET_OVERRIDE to its value"),
    R("M0304", "0.2-0.3", "nki.jit(mode=...)", "rewrite", "the argument goes"),
    R("M0305", "0.2-0.3", "nisa.dma_copy - reading from PSUM", "none", "",
      "which buffer a source lives in is the trace's to know; nkicc's 0.6 front end reports such a copy"),
    R("M0306", "0.2-0.3", "nisa.dma_copy - dge_mode type matching", "none", "",
      "the element types are the trace's to know; the 0.6 front end reports a mismatch"),
    R("M0307", "0.2-0.3", "nisa.dma_copy - dst_rmw_op and unique_indices removed", "partial",
      "`dma_copy(dst=D, src=S, dst_rmw_op=OP)` becomes `dma_compute(dst=D, srcs=[S, D], reduce_op=OP)` "
      "(unique_indices kept); `dst_rmw_op=None` goes",
      "an operator chosen at run time (`dst_rmw_op=op`) needs the guide's if/else split"),
    R("M0308", "0.2-0.3", "nisa.memset - strict type matching", "none", "",
      "the destination dtype is the trace's to know; the 0.6 front end reports a float value for an integer tile"),
    R("M0309", "0.2-0.3", "nisa.tensor_reduce - axis handling fix", "none", "",
      "only kernels that relied on the 0.2 bug change, and which axis they meant is the author's"),
    R("M0310", "0.2-0.3", "nisa.dma_compute - parameter reorder", "rewrite",
      "`dma_compute(dst, srcs, scales, reduce_op)` (four positional) becomes "
      "`dma_compute(dst, srcs, reduce_op, scales=scales)`"),
    R("M0311", "0.2-0.3", "nisa.sendrecv - dma_engine enum", "partial",
      "`use_gpsimd_dma=True/False` becomes `dma_engine=nisa.dma_engine.gpsimd_dma/dma`",
      "a computed flag gets a comment"),
    R("M0312", "0.2-0.3", "nisa.affine_select - offset parameter moved", "rewrite",
      "six positional arguments: the third becomes `offset=`"),
    R("M0313", "0.2-0.3", "nisa.register_move - imm renamed to src", "rewrite",
      "`register_move(dst, imm=V)` becomes `_src = nisa.register_alloc(V)` then `register_move(dst, _src)`"),
    R("M0314", "0.2-0.3", "Collectives - num_channels removed", "rewrite",
      "`num_channels=` goes from `collective_permute_implicit_current_processing_rank_id`"),
    R("M0315", "0.2-0.3", "Output tensors must use nl.shared_hbm", "rewrite",
      "`buffer=nl.hbm` on a tensor a kernel returns becomes `nl.shared_hbm`"),
    R("M0316", "0.2-0.3", "Integer enum constants no longer supported", "rewrite",
      "an integer literal for `dge_mode=`, `engine=`, `oob_mode=`, `reduce_cmd=`, `nc_version=` becomes the "
      "enum member of that value"),
    R("M0317", "0.2-0.3", "String buffer names no longer supported", "rewrite",
      "`buffer='sbuf'` (and psum, hbm, private_hbm, shared_hbm) becomes `buffer=nl.sbuf` ..."),
    R("M0318", "0.2-0.3", "nki.isa.dma_engine alias repurposed", "none", "",
      "the old alias did nothing; kernels that named it get M0311's enum"),
    R("M0319", "0.2-0.3", "Remove keyword-only argument separator (*)", "partial",
      "the `*` goes from a kernel's signature",
      "a keyword-only parameter without a default after defaulted ones would make the signature invalid: commented"),
    R("M0320", "0.2-0.3", "Replace is / is not with == / !=", "rewrite",
      "inside kernels and the functions they call"),
    R("M0321", "0.2-0.3", "Replace list kernel arguments with tuples", "rewrite",
      "list displays as kernel parameter defaults and as arguments of the file's calls to its kernels "
      "become tuples"),
    R("M0322", "0.2-0.3", "nisa.memset - x4 packed type restriction", "none", "",
      "the dtype is the trace's to know; the 0.6 front end reports a non-zero value"),
    R("M0323", "0.2-0.3", "nisa.range_select - parameter fixes", "rewrite",
      "`on_false_value=` and `reduce_cmd=` go: 0.2 used FP32_MIN and reset_reduce whatever they said, "
      "which are 0.3's defaults"),
    R("M0324", "0.2-0.3", "Parameter default value updates", "none", "", "defaults only; old calls keep working"),
    R("M0325", "0.2-0.3", "Matmul accumulation (accumulate=None)", "none", "", "the default keeps 0.2's behaviour"),
    # --- 0.3 -> 0.4 -------------------------------------------------------------
    R("M0401", "0.3-0.4", "nisa.dma_transpose - dst shape and rank now enforced exactly", "none", "",
      "ranks are the trace's to know; the 0.6 front end reports a mismatch"),
    R("M0402", "0.3-0.4", "neuronxcc.nki.* inside kernels - now a compilation error", "rewrite",
      "M0201's rewrite: no `neuronxcc` name is left"),
    R("M0403", "0.3-0.4", "nki.isa.tensor_copy_dynamic_src / _dst - removed", "flag",
      "as M0302", "as M0302"),
    R("M0404", "0.3-0.4", "nki.language.tile_size.total_available_sbuf_size - deprecated", "rewrite",
      "becomes `tile_size.sbuf_fmax_bytes`, the per-partition size it always returned"),
    R("M0405", "0.3-0.4", "Behavior change: CPU simulator precision default (NKI_PRECISE_FP=1)", "none", "",
      "a simulator setting, not source; --check allows the output dtype's rounding", numerics=True),
    # --- 0.4 -> 0.5 -------------------------------------------------------------
    R("M0501", "0.4-0.5", "nki.language.rsqrt - PSUM inputs no longer supported", "none", "",
      "the input's buffer is the trace's to know; the 0.6 front end reports it. The GpSimd engine's "
      "precision: --check allows the output dtype's rounding", numerics=True),
    R("M0502", "0.4-0.5", "NkiTensor.reshape - element count now validated", "none", "",
      "a reshape that changed the element count was a bug; the 0.6 front end reports it"),
    R("M0503", "0.4-0.5", "Deprecation notice: SPMD launch grid for LNC2 kernels", "none", "",
      "advance notice only; nothing changes in 0.5"),
    # --- 0.5 -> 0.6 -------------------------------------------------------------
    R("M0601", "0.5-0.6", "Pattern 1: counted loop with a runtime bound (nl.dynamic_range -> nl.fori_loop)",
      "partial",
      "`for i in nl.dynamic_range(a, b, s): BODY` becomes `def _loop_body_N(i): BODY` and "
      "`nl.fori_loop(a, b, _loop_body_N, s)`",
      "a body with break/continue/return, an else clause, or one that assigns a name used after the loop "
      "(Python state carried across iterations) gets a comment"),
    R("M0602", "0.5-0.6", "Pattern 2: data-dependent (while) loop", "partial",
      "`while reg: BODY`, `reg` from `nisa.register_alloc`, becomes `def _while_body_N(reg): BODY; return reg` "
      "and `nl.while_loop(reg, _while_body_N)`",
      "a condition that is not a register of the function, or a body with break/continue/return, gets a comment"),
    R("M0603", "0.5-0.6", "Rules for migrated loops", "none", "",
      "constraints the rewrites M0601/M0602 keep: the body is moved, not changed"),
)
BY_ID = {r.id: r for r in RULES}

# names the guide deprecates or removes, still listed in the current API reference or
# not: migrated code must use none of them (the census of bench/migrate_tutorials.py)
DEPRECATED = frozenset({
    "nki.language.dynamic_range", "nki.language.tile_size.total_available_sbuf_size", "nki.language.mgrid",
    "nki.language.arange", "nki.language.par_dim", "nki.language.loop_reduce", "nki.simulate_kernel",
    "nki.baremetal", "nki.benchmark", "nki.profile", "nki.isa.tensor_copy_dynamic_src",
    "nki.isa.tensor_copy_dynamic_dst",
})


def sections_between(start: str, stop: str) -> list[str]:
    """The guide sections that take code written for `start` to `stop`, in order."""
    lo, hi = VERSIONS.index(start), VERSIONS.index(stop)
    return [s for s, a, b, _ in SECTIONS if lo <= VERSIONS.index(a) and VERSIONS.index(b) <= hi]


def rules_between(start: str, stop: str) -> list[Rule]:
    wanted = sections_between(start, stop)
    return [r for s in wanted for r in RULES if r.section == s]


TABLE_BEGIN = "<!-- rules table: generated by nkicc.migrate_rules.render_table(); tests check it -->"
TABLE_END = "<!-- end of rules table -->"


def render_table() -> str:
    """The rules as docs/migration.md's table: guide section | rule | rewrite | test."""
    titles = {s: f"{a} -> {b}" if s != "blockdim" else "block dimensions" for s, a, b, _ in SECTIONS}
    lines = [TABLE_BEGIN, "",
             "| guide section | rule | rewrite | test |", "|---|---|---|---|"]
    for r in RULES:
        what = r.rewrite or "no rewrite"
        if r.why:
            what += f" ({'not rewritten' if r.how in ('flag', 'none') else 'the rest'}: {r.why})"
        cell = f"**{r.how}**: {what}".replace("|", "\\|")
        lines.append(f"| {titles[r.section]} | {r.id} {r.heading} | {cell} | `{r.test.split('::')[1]}` |")
    lines += ["", TABLE_END]
    return "\n".join(lines)
