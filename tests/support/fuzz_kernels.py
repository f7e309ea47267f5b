"""Kernel templates, hypothesis strategies and properties for the fuzz tests
(tests/language/test_fuzz.py, bounded for CI) and the long run (bench/fuzz.py).

Kernels must live in a source file (rolling reads the loop's source), so the
fuzzer varies compile-time constants - non-array kernel arguments - of a few
templates: shapes, tile sizes (ragged last tiles through min()), loop kinds,
op families. Properties:

- valid: the rolled trace, the fully unrolled trace (NKI's own semantics) and
  numpy agree (rolled == unrolled bit for bit, numpy within fp32 tolerance);
- invalid: a kernel given a wrong shape or index raises an NkiccError with one
  of the expected codes, located in this file; never another exception.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl

BINARY = ("add", "subtract", "multiply", "maximum", "minimum")
UNARY = ("exp", "tanh", "relu", "square", "abs", "sigmoid", "negative")
LOOPS = (nl.affine_range, nl.sequential_range, nl.static_range, range)  # range here: Python's, traced concretely
LOOP_NAMES = ("affine_range", "sequential_range", "static_range", "python range")

_NP_BINARY = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "maximum": np.maximum,
              "minimum": np.minimum}
_NP_UNARY = {"exp": np.exp, "tanh": np.tanh, "relu": lambda x: np.maximum(x, 0), "square": np.square,
             "abs": np.abs, "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "negative": np.negative}


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


# --- valid templates ---------------------------------------------------------------------------

@nkicc.jit
def elementwise(a, b, P=128, F=512, KIND=0, OP=0, SCALAR=1.5, LOOP=0):
    """out[bb, r, c] = op(a, b) / op(a, SCALAR) / op(a), tile by tile, ragged tiles at the ends."""
    B, R, C = a.shape
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    for bb in nl.affine_range(B):
        for i in nl.affine_range(cdiv(R, P)):
            r0 = i * P
            r1 = min(r0 + P, R)
            for j in LOOPS[LOOP](cdiv(C, F)):
                c0 = j * F
                c1 = min(c0 + F, C)
                ta = nl.load(a[bb, r0:r1, c0:c1])
                t = nl.ndarray((r1 - r0, c1 - c0), dtype=nl.float32, buffer=nl.sbuf)
                if KIND == 0:
                    tb = nl.load(b[bb, r0:r1, c0:c1])
                    nisa.tensor_tensor(dst=t, data1=ta, data2=tb, op=BINARY[OP % len(BINARY)])
                elif KIND == 1:
                    nisa.tensor_scalar(dst=t, data=ta, op0=BINARY[OP % len(BINARY)], operand0=SCALAR)
                else:
                    nisa.activation(dst=t, op=UNARY[OP % len(UNARY)], data=ta)
                nl.store(out[bb, r0:r1, c0:c1], value=t)
    return out


def elementwise_ref(a, b, P, F, KIND, OP, SCALAR, LOOP):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    if KIND == 0:
        return _NP_BINARY[BINARY[OP % len(BINARY)]](a64, b64)
    if KIND == 1:
        return _NP_BINARY[BINARY[OP % len(BINARY)]](a64, np.float32(SCALAR))
    return _NP_UNARY[UNARY[OP % len(UNARY)]](a64)


@nkicc.jit
def row_reduce(a, P=128, F=512, MAX=False, LOOP=0):
    """out[r, 0] = sum (or max) of row r, accumulated over column tiles in an SBUF accumulator."""
    R, C = a.shape
    out = nl.ndarray((R, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    for i in nl.affine_range(cdiv(R, P)):
        r0 = i * P
        r1 = min(r0 + P, R)
        acc = nl.full((P, 1), -3.0e38 if MAX else 0.0, dtype=nl.float32, buffer=nl.sbuf)
        for j in LOOPS[LOOP](cdiv(C, F)):
            c0 = j * F
            c1 = min(c0 + F, C)
            t = nl.load(a[r0:r1, c0:c1])
            part = nl.max(t, axis=1, keepdims=True) if MAX else nl.sum(t, axis=1, keepdims=True)
            nisa.tensor_tensor(dst=acc[0:r1 - r0, :], data1=acc[0:r1 - r0, :], data2=part,
                               op=nl.maximum if MAX else nl.add)
        nl.store(out[r0:r1, :], value=acc[0:r1 - r0, :])
    return out


def row_reduce_ref(a, P, F, MAX, LOOP):
    a64 = a.astype(np.float64)
    return a64.max(axis=1, keepdims=True) if MAX else a64.sum(axis=1, keepdims=True)


@nkicc.jit
def matmul(at, b, TK=128, TM=128, TN=512, LOOP=0):
    """out[M, N] = at[K, M].T @ b[K, N]: K accumulated in PSUM, every dimension tiled, ragged ends."""
    K, M = at.shape
    N = b.shape[1]
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    for m in nl.affine_range(cdiv(M, TM)):
        m0 = m * TM
        m1 = min(m0 + TM, M)
        for n in nl.affine_range(cdiv(N, TN)):
            n0 = n * TN
            n1 = min(n0 + TN, N)
            ps = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
            for k in LOOPS[LOOP](cdiv(K, TK)):
                k0 = k * TK
                k1 = min(k0 + TK, K)
                nisa.nc_matmul(dst=ps[0:m1 - m0, 0:n1 - n0], stationary=nl.load(at[k0:k1, m0:m1]),
                               moving=nl.load(b[k0:k1, n0:n1]))
            nl.store(out[m0:m1, n0:n1], value=nl.copy(ps[0:m1 - m0, 0:n1 - n0]))
    return out


def matmul_ref(at, b, TK, TM, TN, LOOP):
    return at.astype(np.float64).T @ b.astype(np.float64)


@nkicc.jit
def transpose(a, P=128, Q=128):
    """out = a.T, through the Tensor Engine, in tiles of P x Q."""
    R, C = a.shape
    out = nl.ndarray((C, R), dtype=nl.float32, buffer=nl.shared_hbm)
    for i in nl.affine_range(cdiv(R, P)):
        r0 = i * P
        r1 = min(r0 + P, R)
        for j in nl.affine_range(cdiv(C, Q)):
            c0 = j * Q
            c1 = min(c0 + Q, C)
            nl.store(out[c0:c1, r0:r1], value=nl.transpose(nl.load(a[r0:r1, c0:c1])))
    return out


def transpose_ref(a, P, Q):
    return a.astype(np.float64).T


@nkicc.jit
def offset_rows(a, P=128, FACTOR=2.0, CB=0):
    """Row tiles addressed through a runtime offset in a hardware loop (the seed's pattern); with
    CB, each row tile in CB-column blocks by a static loop through which the offset stays fixed."""
    R, C = a.shape
    out = nl.ndarray((R, C), dtype=nl.float32, buffer=nl.shared_hbm)
    row = nl.zeros((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    for r in nl.dynamic_range(R // P):
        for c in nl.static_range(C // CB if CB else 1):
            w = CB or C
            t = nl.load(a.ap([[C, P], [1, w]], offset=c * w, scalar_offset=row, indirect_dim=0))
            nl.store(out.ap([[C, P], [1, w]], offset=c * w, scalar_offset=row, indirect_dim=0),
                     value=nl.multiply(t, FACTOR))
        nisa.tensor_scalar(dst=row, data=row, op0=nl.add, operand0=P)
    return out


def offset_rows_ref(a, P, FACTOR, CB=0):
    return a.astype(np.float64) * np.float32(FACTOR)


@nkicc.jit
def staged_tile(a, ZERO=True, WRITERS=(0,), ORDER=(0,), PER_BLOCK=False, FILL=0.5):
    """One tile assembled from 32-row blocks, each written by its own instruction (a DMA from its
    own rows or from block 0's rows of the input, an engine op, a memset), after an optional
    memset of the whole tile; then read whole or block by block. The DMAs rotate over the queues
    and their waits are narrowed to the memory they touched, so every order between a block's
    writers and readers must be a semaphore of its own (the hazard checker is on in every run)."""
    R, C = a.shape
    out = nl.ndarray((R, C), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((R, C), dtype=nl.float32, buffer=nl.sbuf)
    if ZERO:
        nisa.memset(dst=t, value=0.0)
    for j in ORDER:  # a tuple: traced as it runs, one instruction per block
        blk = t[j * 32:(j + 1) * 32, :]
        if WRITERS[j] == 0:
            nisa.dma_copy(dst=blk, src=a[j * 32:(j + 1) * 32, :])
        elif WRITERS[j] == 1:
            nisa.dma_copy(dst=blk, src=a[0:32, :])
        elif WRITERS[j] == 2:
            src = nl.load(a[j * 32:(j + 1) * 32, :])
            nisa.tensor_scalar(dst=blk, data=src, op0=nl.multiply, operand0=-1.0)
        else:
            nisa.memset(dst=blk, value=FILL)
    res = nl.ndarray((R, C), dtype=nl.float32, buffer=nl.sbuf)
    if PER_BLOCK:
        for j in ORDER[::-1]:
            nisa.tensor_scalar(dst=res[j * 32:(j + 1) * 32, :], data=t[j * 32:(j + 1) * 32, :],
                               op0=nl.multiply, operand0=2.0)
    else:
        nisa.tensor_scalar(dst=res, data=t, op0=nl.multiply, operand0=2.0)
    nisa.dma_copy(dst=out, src=res)
    return out


def staged_tile_ref(a, ZERO, WRITERS, ORDER, PER_BLOCK, FILL):
    t = np.zeros(a.shape, dtype=np.float64)
    for j in ORDER:
        rows = slice(j * 32, (j + 1) * 32)
        t[rows] = (a[rows], a[0:32], -a[rows], np.full((32, a.shape[1]), FILL))[WRITERS[j]]
    return 2.0 * t


@dataclass
class Case:
    family: str
    kernel: object
    arrays: tuple
    consts: dict
    ref: object = None
    codes: tuple = ()  # for invalid cases: the acceptable error codes
    extra: dict = field(default_factory=dict)

    def __repr__(self) -> str:
        shapes = ", ".join(f"{list(a.shape)}" for a in self.arrays)
        return f"{self.family}({shapes}, {self.consts})"


def _arrays(draw, *shapes):
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(s).astype(np.float32) for s in shapes)


@st.composite
def elementwise_cases(draw):
    B, R, C = draw(st.integers(1, 2)), draw(st.integers(1, 300)), draw(st.integers(1, 700))
    kind = draw(st.integers(0, 2))
    consts = dict(P=draw(st.integers(1, 128)), F=draw(st.sampled_from([1, 7, 64, 128, 333, 512, 1024])),
                  KIND=kind, OP=draw(st.integers(0, 20)), SCALAR=draw(st.sampled_from([0.5, -2.0, 3.25])),
                  LOOP=draw(st.integers(0, 3)))
    # keep the unrolled oracle small: at most ~60 tiles
    while B * cdiv(R, consts["P"]) * cdiv(C, consts["F"]) > 60:
        consts["P"], consts["F"] = min(128, consts["P"] * 2), consts["F"] * 2
    a, b = _arrays(draw, (B, R, C), (B, R, C))
    return Case("elementwise", elementwise, (a, b), consts, elementwise_ref)


@st.composite
def row_reduce_cases(draw):
    R, C = draw(st.integers(1, 300)), draw(st.integers(1, 1500))
    consts = dict(P=draw(st.integers(1, 128)), F=draw(st.sampled_from([16, 100, 256, 512, 2048])),
                  MAX=draw(st.booleans()), LOOP=draw(st.integers(0, 3)))
    while cdiv(R, consts["P"]) * cdiv(C, consts["F"]) > 60:
        consts["P"], consts["F"] = min(128, consts["P"] * 2), consts["F"] * 2
    (a,) = _arrays(draw, (R, C))
    return Case("row_reduce", row_reduce, (a,), consts, row_reduce_ref)


@st.composite
def matmul_cases(draw):
    K, M, N = draw(st.integers(1, 300)), draw(st.integers(1, 200)), draw(st.integers(1, 700))
    consts = dict(TK=draw(st.integers(1, 128)), TM=draw(st.integers(1, 128)), TN=draw(st.integers(1, 512)),
                  LOOP=draw(st.integers(0, 3)))
    while cdiv(K, consts["TK"]) * cdiv(M, consts["TM"]) * cdiv(N, consts["TN"]) > 40:
        consts["TK"] = min(128, consts["TK"] * 2)
        consts["TN"] = min(512, consts["TN"] * 2)
        consts["TM"] = min(128, consts["TM"] * 2)
    at, b = _arrays(draw, (K, M), (K, N))
    return Case("matmul", matmul, (at, b), consts, matmul_ref)


@st.composite
def transpose_cases(draw):
    R, C = draw(st.integers(1, 300)), draw(st.integers(1, 300))
    consts = dict(P=draw(st.integers(1, 128)), Q=draw(st.integers(1, 128)))
    while cdiv(R, consts["P"]) * cdiv(C, consts["Q"]) > 40:
        consts["P"], consts["Q"] = min(128, consts["P"] * 2), min(128, consts["Q"] * 2)
    (a,) = _arrays(draw, (R, C))
    return Case("transpose", transpose, (a,), consts, transpose_ref)


@st.composite
def offset_rows_cases(draw):
    P, n, C = draw(st.integers(1, 128)), draw(st.integers(1, 6)), draw(st.integers(1, 300))
    CB = draw(st.sampled_from([0, 0, 1, 8, 50]))  # column blocks: a static loop inside the dynamic one
    if CB:
        C = CB * draw(st.integers(2, max(2, 300 // CB)))
    (a,) = _arrays(draw, (P * n, C))
    return Case("offset_rows", offset_rows, (a,), dict(P=P, FACTOR=draw(st.sampled_from([2.0, -0.5])), CB=CB),
                offset_rows_ref)


@st.composite
def staged_tile_cases(draw):
    nb, C = draw(st.integers(1, 4)), draw(st.integers(1, 200))
    order = tuple(draw(st.permutations(range(nb))))
    consts = dict(ZERO=draw(st.booleans()), WRITERS=tuple(draw(st.integers(0, 3)) for _ in range(nb)),
                  ORDER=order, PER_BLOCK=draw(st.booleans()), FILL=draw(st.sampled_from([0.5, -3.0])))
    (a,) = _arrays(draw, (32 * nb, C))
    return Case("staged_tile", staged_tile, (a,), consts, staged_tile_ref)


VALID = {"elementwise": elementwise_cases, "row_reduce": row_reduce_cases, "matmul": matmul_cases,
         "transpose": transpose_cases, "offset_rows": offset_rows_cases, "staged_tile": staged_tile_cases}


def check_valid(case: Case) -> None:
    """rolled == unrolled bit for bit (both on the reference simulator), and
    the full pipeline on the default (machine) simulator == numpy within fp32
    tolerance. (The machine model and the reference interpreter may differ in
    the last bits of a matmul: BLAS sums differently laid out operands in a
    different order.)"""
    compiled = nkicc.compile(case.kernel, *case.arrays, **case.consts)
    machine = compiled.run(*case.arrays)
    compiled.simulator = "reference"
    rolled = compiled.run(*case.arrays)
    oracle = nkicc.compile(case.kernel, *case.arrays, unroll=True, **case.consts)
    oracle.simulator = "reference"
    unrolled = oracle.run(*case.arrays)
    np.testing.assert_array_equal(rolled, unrolled, err_msg=f"rolled != unrolled for {case!r}")
    want = case.ref(*case.arrays, **case.consts)
    scale = max(1.0, float(np.abs(want).max(initial=0.0)))
    for got, what in ((rolled, "reference"), (machine, "machine")):
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-5, atol=2e-5 * scale,
                                   err_msg=f"nkicc ({what} simulator) != numpy for {case!r}")


# --- invalid kernels ----------------------------------------------------------------------------

@nkicc.jit
def tiles_wrong(a, P=128, NT=1, F=64, R0=0, C_END=None):
    """Row tiles of P rows (NT of them, from row R0), columns [0, C_END): wrong values overrun."""
    R, C = a.shape
    c_end = C if C_END is None else C_END
    out = nl.ndarray((R, C), dtype=nl.float32, buffer=nl.shared_hbm)
    for i in nl.affine_range(NT):
        t = nl.load(a[R0 + i * P:R0 + (i + 1) * P, 0:c_end])
        nl.store(out[R0 + i * P:R0 + (i + 1) * P, 0:c_end], value=nl.exp(t))
    return out


@nkicc.jit
def matmul_wrong(s, m, KS=128, KM=128, MS=128, NM=512, PSUM_N=None):
    """nc_matmul of s[0:KS, 0:MS] and m[0:KM, 0:NM]: wrong contraction or tile sizes."""
    pn = NM if PSUM_N is None else PSUM_N
    out = nl.ndarray((MS, pn), dtype=nl.float32, buffer=nl.shared_hbm)
    ps = nl.ndarray((MS, pn), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=ps, stationary=nl.load(s[0:KS, 0:MS]), moving=nl.load(m[0:KM, 0:NM]))
    nl.store(out, value=nl.copy(ps))
    return out


@nkicc.jit
def partition_window(a, START=0, COUNT=128):
    """A copy of partitions [START, START + COUNT) of a tile: an illegal start or a window past 128."""
    out = nl.ndarray((COUNT, a.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(a)
    u = nl.ndarray((COUNT, a.shape[1]), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=u, src=t[START:START + COUNT, :])
    nl.store(out, value=u)
    return out


@nkicc.jit
def index_wrong(a, IDX=0, PATTERN=((64, 128), (1, 64)), OFFSET=0):
    """An integer index and an access pattern with offset, either possibly out of range."""
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(a[IDX])
    u = nl.load(a.ap([list(p) for p in PATTERN], offset=OFFSET))
    nl.store(out, value=nl.add(t, u[:, 0:64]))
    return out


@nkicc.jit
def elementwise_mismatch(a, b, RA=128, RB=128, FA=64, FB=64):
    """tensor_tensor of tiles a[0:RA, 0:FA] and b[0:RB, 0:FB] that do not match."""
    out = nl.ndarray((RA, FA), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((RA, FA), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=t, data1=nl.load(a[0:RA, 0:FA]), data2=nl.load(b[0:RB, 0:FB]), op=nl.add)
    nl.store(out, value=t)
    return out


@st.composite
def tiles_wrong_cases(draw):
    R, C = draw(st.integers(1, 400)), draw(st.integers(1, 300))
    how = draw(st.sampled_from(["too_many_tiles", "tile_too_tall", "columns_past_end", "start_negative"]))
    consts = dict(P=min(128, R), NT=max(1, R // min(128, R)), R0=0, C_END=None)
    if how == "too_many_tiles":   # one tile more than the rows hold
        consts["NT"] = cdiv(R, consts["P"]) + draw(st.integers(1, 3))
        codes = ("E101",)
    elif how == "tile_too_tall":  # more than 128 partitions
        consts["P"] = draw(st.integers(129, 1024))
        consts["NT"] = 1
        R = max(R, consts["P"])
        codes = ("E110",)
    elif how == "columns_past_end":
        consts["C_END"] = C + draw(st.integers(1, 100))
        codes = ("E101",)
    else:
        consts["R0"] = -draw(st.integers(1, 64)) * 2  # negative start rows: not Python's wrap-around
        codes = ("E101",)
    (a,) = _arrays(draw, (R, C))
    return Case("tiles_wrong", tiles_wrong, (a,), consts, codes=codes, extra={"how": how})


@st.composite
def matmul_wrong_cases(draw):
    how = draw(st.sampled_from(["contraction", "stationary_wide", "moving_wide", "psum_wide", "dst_shape"]))
    k, mm, n = draw(st.integers(1, 128)), draw(st.integers(1, 128)), draw(st.integers(1, 512))
    consts = dict(KS=k, KM=k, MS=mm, NM=n, PSUM_N=None)
    codes = ("E130",)
    if how == "contraction":
        consts["KM"] = draw(st.integers(1, 128).filter(lambda x: x != k))
    elif how == "stationary_wide":
        consts["MS"] = draw(st.integers(129, 300))
        codes = ("E110", "E130")  # the psum dst [MS, N] has too many partitions first
    elif how == "moving_wide":
        consts["NM"] = draw(st.integers(513, 1024))
        codes = ("E133", "E130")  # the psum dst [M, NM] is wider than a bank first
    elif how == "psum_wide":
        consts["PSUM_N"] = draw(st.integers(513, 2048))
        codes = ("E133",)
    else:
        consts["PSUM_N"] = draw(st.integers(1, 512).filter(lambda x: x != n))
        codes = ("E130",)
    s, m = _arrays(draw, (max(consts["KS"], 1), max(consts["MS"], 1)), (max(consts["KM"], 1), consts["NM"]))
    return Case("matmul_wrong", matmul_wrong, (s, m), consts, codes=codes, extra={"how": how})


def _legal_start(start: int, count: int) -> bool:
    align = 32 if count <= 32 else 64 if count <= 64 else 128
    return start % align == 0


@st.composite
def partition_window_cases(draw):
    count = draw(st.integers(1, 128))
    start = draw(st.integers(1, 127).filter(lambda s: not _legal_start(s, count) or s + count > 128))
    (a,) = _arrays(draw, (128, draw(st.integers(1, 64))))
    codes = ("E101",) if start + count > 128 else ("E111",)
    return Case("partition_window", partition_window, (a,), dict(START=start, COUNT=count), codes=codes)


@st.composite
def index_wrong_cases(draw):
    n = draw(st.integers(1, 4))
    how = draw(st.sampled_from(["index", "pattern", "offset"]))
    consts = dict(IDX=draw(st.integers(0, n - 1)), PATTERN=((64, 128), (1, 64)), OFFSET=0)
    if how == "index":
        consts["IDX"] = draw(st.one_of(st.integers(n, n + 10), st.integers(-n - 10, -n - 1)))
    elif how == "pattern":
        # 128 rows of K elements from the start: past the end of all n * 8192 elements
        consts["PATTERN"] = ((64, 128), (1, n * 8192 - 8127 + draw(st.integers(0, 100))))
    else:
        consts["OFFSET"] = draw(st.one_of(st.integers(-500, -1), st.integers(1, 64).map(lambda x: x + (n - 1) * 8192)))
    (a,) = _arrays(draw, (n, 128, 64))
    return Case("index_wrong", index_wrong, (a,), consts, codes=("E101",), extra={"how": how})


@st.composite
def elementwise_mismatch_cases(draw):
    ra, fa = draw(st.integers(1, 128)), draw(st.integers(1, 256))
    rb = draw(st.integers(1, 128))
    fb = draw(st.integers(1, 256))
    if (ra, fa) == (rb, fb):
        fb += 1
    a, b = _arrays(draw, (128, 256), (128, 257))
    return Case("elementwise_mismatch", elementwise_mismatch, (a, b), dict(RA=ra, RB=rb, FA=fa, FB=fb),
                codes=("E140",))


INVALID = {"tiles_wrong": tiles_wrong_cases, "matmul_wrong": matmul_wrong_cases,
           "partition_window": partition_window_cases, "index_wrong": index_wrong_cases,
           "elementwise_mismatch": elementwise_mismatch_cases}


# --- anything goes: valid or not, never an internal error -------------------------------------------

@st.composite
def tiles_any_cases(draw):
    R, C = draw(st.integers(1, 400)), draw(st.integers(1, 200))
    consts = dict(P=draw(st.integers(1, 200)), NT=draw(st.integers(1, 5)), R0=draw(st.integers(-300, 300)),
                  C_END=draw(st.one_of(st.none(), st.integers(1, C + 40))))
    (a,) = _arrays(draw, (R, C))
    return Case("tiles_any", tiles_wrong, (a,), consts, lambda a, **k: np.exp(a.astype(np.float64)))


@st.composite
def partition_any_cases(draw):
    start, count = draw(st.integers(0, 140)), draw(st.integers(1, 140))
    (a,) = _arrays(draw, (128, draw(st.integers(1, 64))))
    return Case("partition_any", partition_window, (a,), dict(START=start, COUNT=count),
                lambda a, START, COUNT: a[START:START + COUNT].astype(np.float64))


ANY = {"tiles_any": tiles_any_cases, "partition_any": partition_any_cases}


def check_any(case: Case) -> str:
    """Either an NkiccError located in this file, or the numpy result; returns
    the code, or "ok"."""
    try:
        got = nkicc.compile(case.kernel, *case.arrays, **case.consts).run(*case.arrays)
    except nkicc.NkiccError as err:
        assert err.loc is not None and err.loc.file == __file__, f"{case!r}: not located in the kernel: {err}"
        return err.code
    want = case.ref(*case.arrays, **case.consts)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-5, atol=2e-5, err_msg=repr(case))
    return "ok"


def check_invalid(case: Case) -> str:
    """The kernel is rejected with an expected code at a line of this file,
    when compiled or when run; returns the code."""
    try:
        nkicc.compile(case.kernel, *case.arrays, **case.consts).run(*case.arrays)
    except nkicc.NkiccError as err:
        assert err.code in case.codes, f"{case!r}: expected {case.codes}, got {err}"
        assert err.loc is not None and err.loc.file == __file__, f"{case!r}: not located in the kernel: {err}"
        assert "\n" not in err.one_line()
        return err.code
    raise AssertionError(f"{case!r} was accepted; expected {case.codes}")
