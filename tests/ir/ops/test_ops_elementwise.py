"""Conformance: element-wise nl operations and nisa.tensor_tensor / tensor_scalar / activation."""
import math

import numpy as np
import pytest

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl
from tests.support.ops_helpers import bf16, check_error, close, f32, rand, rounded


# the reference names whose behaviour this module checks against numpy (bench/api_coverage.py)
pytestmark = pytest.mark.api(
    "nl.add", "nl.subtract", "nl.multiply", "nl.divide", "nl.maximum", "nl.minimum", "nl.power", "nl.equal",
    "nl.not_equal", "nl.less", "nl.less_equal", "nl.greater", "nl.greater_equal", "nl.bitwise_and",
    "nl.bitwise_or", "nl.bitwise_xor", "nl.logical_and", "nl.logical_or", "nl.logical_xor", "nl.exp", "nl.log",
    "nl.sqrt", "nl.rsqrt", "nl.tanh", "nl.sigmoid", "nl.relu", "nl.gelu", "nl.silu", "nl.square", "nl.abs",
    "nl.negative", "nl.reciprocal", "nl.sin", "nl.cos", "nl.floor", "nl.ceil", "nl.sign", "nl.gelu_apprx_tanh",
    "nisa.tensor_tensor", "nisa.tensor_scalar", "nisa.activation")

_erf = np.vectorize(math.erf, otypes=[np.float64])

BINARY_REF = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
    "maximum": np.maximum, "minimum": np.minimum, "power": np.power,
    "equal": np.equal, "not_equal": np.not_equal, "less": np.less, "less_equal": np.less_equal,
    "greater": np.greater, "greater_equal": np.greater_equal,
}
INT_OK = ("add", "subtract", "multiply", "maximum", "minimum", "equal", "not_equal", "less", "less_equal",
          "greater", "greater_equal")

UNARY_REF = {
    "exp": (np.exp, -3, 3), "log": (np.log, 0.05, 5), "sqrt": (np.sqrt, 0, 5),
    "rsqrt": (lambda x: 1 / np.sqrt(x), 0.1, 5), "tanh": (np.tanh, -3, 3),
    "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), -5, 5), "relu": (lambda x: np.maximum(x, 0), -2, 2),
    "gelu": (lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))), -4, 4),
    "silu": (lambda x: x / (1 + np.exp(-x)), -5, 5), "square": (np.square, -3, 3), "abs": (np.abs, -3, 3),
    "negative": (np.negative, -3, 3), "reciprocal": (lambda x: 1 / x, 0.2, 3), "sin": (np.sin, -4, 4),
    "cos": (np.cos, -4, 4), "floor": (np.floor, -5, 5), "ceil": (np.ceil, -5, 5), "sign": (np.sign, -2, 2),
    "gelu_apprx_tanh": (lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))), -4, 4),
}


def operands(rng, op, shape, dtype):
    """Random operands for a binary op: positive bases for power, no tiny divisors, some ties."""
    if op == "power":
        a, b = rand(rng, shape, dtype, 0.5, 2.0), rand(rng, shape, dtype, -2, 2)
    elif op == "divide":
        a = rand(rng, shape, dtype)
        b = (rand(rng, shape, np.float32, 0.5, 2.0) * rng.choice([-1, 1], size=shape)).astype(dtype)
    elif np.dtype(dtype).kind == "i":
        a, b = rand(rng, shape, dtype, -50, 50), rand(rng, shape, dtype, -50, 50)
    else:
        a, b = rand(rng, shape, dtype), rand(rng, shape, dtype)
    if op in ("equal", "not_equal", "less_equal", "greater_equal", "maximum", "minimum"):
        b = np.where(rng.random(shape) < 0.3, a, b).astype(dtype)
    return a, b


def oracle(op, a, b, dtype):
    want = BINARY_REF[op](np.asarray(a, np.float64) if np.dtype(dtype).kind != "i" else a.astype(np.int64),
                          np.asarray(b, np.float64) if np.dtype(dtype).kind != "i" else np.asarray(b).astype(np.int64))
    return np.asarray(want).astype(np.float64)


def binary_kernel(op):
    fn = getattr(nl, op)

    @nkicc.jit
    def k(a, b):
        out = nl.ndarray(np.broadcast_shapes(a.shape, b.shape), dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=fn(nl.load(a), nl.load(b)))
        return out
    return k


# --- nl binary ops ------------------------------------------------------------------

@pytest.mark.parametrize("op,dtype", [(op, dt) for dt in (np.float32, bf16, np.float16, np.int32)
                                      for op in BINARY_REF if dt != np.int32 or op in INT_OK])
def test_binary_tile_tile(rng, op, dtype):
    shape = (128, 37) if dtype != np.float16 else (1, 37)
    a, b = operands(rng, op, shape, dtype)
    got = binary_kernel(op)(a, b)
    assert got.dtype == np.dtype(dtype)
    close(got, rounded(oracle(op, f32(a), f32(b), dtype), dtype) if np.dtype(dtype).kind != "i"
          else oracle(op, a, b, dtype), dtype)


@pytest.mark.parametrize("op", list(BINARY_REF))
@pytest.mark.parametrize("dtype", [np.float32, bf16])
def test_binary_broadcast_column(rng, op, dtype):
    # (P, 1) against (P, F), either side
    a, b = operands(rng, op, (128, 37), dtype)
    col = b[:, :1].copy()
    k = binary_kernel(op)
    close(k(a, col), rounded(oracle(op, f32(a), f32(col), dtype), dtype), dtype)
    col_a = a[:, 5:6].copy()
    close(k(col_a, b), rounded(oracle(op, f32(col_a), f32(b), dtype), dtype), dtype)


@pytest.mark.parametrize("op,dtype", [(op, dt) for dt in (np.float32, bf16, np.int32)
                                      for op in BINARY_REF if dt != np.int32 or op in INT_OK])
def test_binary_tile_scalar_and_scalar_tile(rng, op, dtype):
    fn = getattr(nl, op)
    a, _ = operands(rng, op, (64, 37), dtype)
    if np.dtype(dtype).kind == "i":
        s = int(a[3, 4])
    elif op == "power":
        s = 1.5
    elif op == "divide":
        s = -1.75
    else:
        s = float(f32(a)[3, 4])          # an exact tie with one element
    rev = f32(a) if op != "divide" else f32(a) + np.float32(3)  # keep divisors away from 0
    rev = rev.astype(dtype)

    @nkicc.jit
    def k(x, y):
        o1 = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        o2 = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(o1, value=fn(nl.load(x), s))
        nl.store(o2, value=fn(s, nl.load(y)))
        return o1, o2

    o1, o2 = k(a, rev)
    if np.dtype(dtype).kind == "i":
        close(o1, oracle(op, a, np.int64(s), dtype), dtype)
        close(o2, oracle(op, np.full_like(rev, s), rev, dtype), dtype)
    else:
        close(o1, rounded(oracle(op, f32(a), np.float32(s), dtype), dtype), dtype)
        close(o2, rounded(oracle(op, np.float32(s), f32(rev), dtype), dtype), dtype)


def test_binary_output_dtype_and_mixed_inputs(rng):
    @nkicc.jit
    def k(a, b):
        o1 = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        o2 = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        x, y = nl.load(a), nl.load(b)
        r = nl.multiply(x, y, dtype=nl.float32)           # bf16 x bf16 -> fp32 result tile
        assert r.dtype == np.float32
        nl.store(o1, value=r)
        m = nl.add(x, nl.load(a, dtype=nl.float32))       # bf16 + fp32 -> fp32
        assert m.dtype == np.float32
        nl.store(o2, value=m)
        return o1, o2

    a, b = rand(rng, (128, 37), bf16), rand(rng, (128, 37), bf16)
    o1, o2 = k(a, b)
    close(o1, f32(a) * f32(b), np.float32)
    close(o2, f32(a) + f32(a), np.float32)


@pytest.mark.parametrize("op,ref", [("bitwise_and", np.bitwise_and), ("bitwise_or", np.bitwise_or),
                                    ("bitwise_xor", np.bitwise_xor), ("logical_and", np.logical_and),
                                    ("logical_or", np.logical_or), ("logical_xor", np.logical_xor)])
def test_bitwise_logical_int32(rng, op, ref):
    a, b = rand(rng, (128, 37), np.int32, 0, 1000), rand(rng, (128, 37), np.int32, 0, 1000)
    b[:, :5] = 0
    np.testing.assert_array_equal(binary_kernel(op)(a, b), ref(a, b).astype(np.int32))


@pytest.mark.parametrize("out_dt", [np.uint8, np.float32, bf16])
def test_comparison_result_dtype(rng, out_dt):
    @nkicc.jit
    def k(a, b):
        out = nl.ndarray(a.shape, dtype=out_dt, buffer=nl.shared_hbm)
        m = nl.less(nl.load(a), nl.load(b), dtype=out_dt)
        assert m.dtype == out_dt
        nl.store(out, value=m)
        return out

    a, b = rand(rng, (128, 37)), rand(rng, (128, 37))
    np.testing.assert_array_equal(f32(k(a, b)), (a < b).astype(np.float32))


def test_ops_on_1d_and_psum_tiles(rng):
    @nkicc.jit
    def k(a, b):
        o1 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        o2 = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.shared_hbm)
        nl.store(o1, value=nl.add(nl.exp(nl.load(a)), 1.0))     # (P,) tile: one element per partition
        p = nl.ndarray(b.shape, dtype=nl.float32, buffer=nl.psum)
        nisa.tensor_copy(dst=p, src=nl.load(b))
        nl.store(o2, value=nl.multiply(nl.tanh(p), p))           # nl ops read PSUM
        return o1, o2

    a, b = rand(rng, (128,)), rand(rng, (64, 37))
    o1, o2 = k(a, b)
    close(o1, np.exp(a.astype(np.float64)) + 1)
    close(o2, np.tanh(b.astype(np.float64)) * b)


# --- nl unary ops -------------------------------------------------------------------

@pytest.mark.parametrize("op", list(UNARY_REF))
@pytest.mark.parametrize("dtype,shape", [(np.float32, (128, 37)), (np.float32, (1, 5)), (bf16, (128, 37)),
                                         (np.float16, (64, 16))])
def test_unary(rng, op, dtype, shape):
    ref, lo, hi = UNARY_REF[op]
    fn = getattr(nl, op)

    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = fn(nl.load(a))
        assert t.shape == a.shape and t.dtype == a.dtype
        nl.store(out, value=t)
        return out

    a = rand(rng, shape, dtype, lo, hi)
    if op == "sign":
        a.reshape(-1)[:3] = 0
    got = k(a)
    want = ref(np.asarray(f32(a), np.float64))
    if dtype == np.float32:
        close(got, want, dtype, rtol=1e-5, atol=1e-6)
    else:
        close(got, rounded(want, dtype), dtype)


def test_unary_with_dtype_and_3d(rng):
    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.exp(nl.load(a), dtype=nl.float32)
        assert t.dtype == np.float32
        nl.store(out, value=t)
        return out

    a = rand(rng, (32, 3, 5), bf16)
    close(k(a), np.exp(f32(a).astype(np.float64)), np.float32)


# --- nisa.tensor_tensor -------------------------------------------------------------

@pytest.mark.parametrize("op", [nl.add, np.subtract, nl.multiply, "maximum", nl.divide, nl.greater_equal])
@pytest.mark.parametrize("dtype", [np.float32, bf16])
def test_tensor_tensor(rng, op, dtype):
    name = getattr(op, "__name__", op)

    @nkicc.jit
    def k(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=t, data1=nl.load(a), data2=nl.load(b), op=op)
        nl.store(out, value=t)
        return out

    a, b = operands(rng, name, (128, 37), dtype)
    close(k(a, b), rounded(oracle(name, f32(a), f32(b), dtype), dtype), dtype)


def test_tensor_tensor_psum_operand_and_cast(rng):
    @nkicc.jit
    def k(a, b):
        out = nl.ndarray(a.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
        p = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.psum)
        nisa.tensor_copy(dst=p, src=nl.load(a))
        t = nl.ndarray(a.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=t, data1=p, data2=nl.load(b), op=nl.subtract)
        nl.store(out, value=t)
        return out

    a, b = rand(rng, (128, 512)), rand(rng, (128, 512))
    got = k(a, b)
    assert got.dtype == bf16
    close(got, rounded(a - b, bf16), bf16)


def test_tensor_tensor_int32(rng):
    @nkicc.jit
    def k(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=t, data1=nl.load(a), data2=nl.load(b), op=nl.multiply)
        nisa.tensor_tensor(dst=t, data1=t, data2=nl.load(b), op=nl.subtract)
        nl.store(out, value=t)
        return out

    a, b = rand(rng, (128, 37), np.int32, -1000, 1000), rand(rng, (128, 37), np.int32, -1000, 1000)
    np.testing.assert_array_equal(k(a, b), a * b - b)


# --- nisa.tensor_scalar -------------------------------------------------------------

def _ts_ref(x, op, operand, reverse):
    return BINARY_REF[op](operand, x) if reverse else BINARY_REF[op](x, operand)


@pytest.mark.parametrize("op0,rev0,op1,rev1,col0,col1", [
    ("multiply", False, None, False, False, False),
    ("subtract", True, None, False, False, False),
    ("add", False, "multiply", False, True, False),
    ("divide", True, "subtract", True, True, False),
    ("maximum", False, "minimum", False, False, False),
    ("subtract", False, "divide", False, True, True),
    ("power", False, "add", True, False, True),
])
@pytest.mark.parametrize("dtype", [np.float32, bf16])
def test_tensor_scalar(rng, op0, rev0, op1, rev1, col0, col1, dtype):
    s0, s1 = float(rng.uniform(0.5, 1.5)), float(rng.uniform(-1.5, -0.5))

    @nkicc.jit
    def k(a, c0, c1):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        x = nl.load(a)
        o0 = nl.load(c0) if col0 else s0
        o1 = nl.load(c1) if col1 else s1
        if op1 is None:
            nisa.tensor_scalar(dst=t, data=x, op0=op0, operand0=o0, reverse0=rev0)
        else:
            nisa.tensor_scalar(dst=t, data=x, op0=getattr(nl, op0), operand0=o0, reverse0=rev0,
                               op1=getattr(nl, op1), operand1=o1, reverse1=rev1)
        nl.store(out, value=t)
        return out

    p = 96
    a = rand(rng, (p, 37), dtype, 0.5, 2.0)
    c0 = rand(rng, (p, 1), np.float32, 0.5, 1.5)
    c1 = rand(rng, (p, 1), np.float32, -1.5, -0.5)
    x = f32(a).astype(np.float64)
    r = _ts_ref(x, op0, c0 if col0 else s0, rev0)
    if op1 is not None:
        r = _ts_ref(r, op1, c1 if col1 else s1, rev1)
    close(k(a, c0, c1), rounded(r, dtype), dtype, rtol=5e-5 if dtype == np.float32 else None)


def test_tensor_scalar_int32_and_cast(rng):
    @nkicc.jit
    def k(a):
        o1 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        o2 = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        x = nl.load(a)
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=t, data=x, op0=nl.multiply, operand0=3, op1=nl.add, operand1=2048)
        nl.store(o1, value=t)
        f = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=f, data=x, op0=nl.divide, operand0=4)   # int in, fp32 out
        nl.store(o2, value=f)
        return o1, o2

    a = rand(rng, (128, 37), np.int32, -5000, 5000)
    o1, o2 = k(a)
    np.testing.assert_array_equal(o1, a * 3 + 2048)
    close(o2, a / 4.0, np.float32)


# --- nisa.activation ----------------------------------------------------------------

@pytest.mark.parametrize("op", [nl.exp, nl.tanh, nl.relu, nl.sigmoid, nl.copy, "identity", nl.square])
@pytest.mark.parametrize("scale_kind", ["float", "tile"])
@pytest.mark.parametrize("with_bias", [False, True])
def test_activation_bias_scale(rng, op, scale_kind, with_bias):
    name = {"copy": "identity"}.get(getattr(op, "__name__", op), getattr(op, "__name__", op))
    ref = {"identity": lambda x: x, "exp": np.exp, "tanh": np.tanh, "relu": lambda x: np.maximum(x, 0),
           "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "square": np.square}[name]
    s = float(rng.uniform(0.3, 1.2))

    @nkicc.jit
    def k(a, sc, bi):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        scale = nl.load(sc) if scale_kind == "tile" else s
        bias = nl.load(bi) if with_bias else None
        nisa.activation(dst=t, op=op, data=nl.load(a), bias=bias, scale=scale)
        nl.store(out, value=t)
        return out

    a = rand(rng, (128, 37))
    sc, bi = rand(rng, (128, 1), lo=0.3, hi=1.2), rand(rng, (128, 1))
    x = a.astype(np.float64) * (sc if scale_kind == "tile" else np.float32(s))
    if with_bias:
        x = x + bi
    close(k(a, sc, bi), ref(x), np.float32, rtol=3e-5)


@pytest.mark.parametrize("dtype", [np.float32, bf16])
@pytest.mark.parametrize("shape", [(128, 37), (1, 300), (16, 4, 9)])
def test_activation_reduce_res(rng, dtype, shape):
    @nkicc.jit
    def k(a, bi):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        red = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        r = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=t, op=nl.exp, data=nl.load(a), bias=nl.load(bi), scale=-0.5,
                        reduce_op=nl.add, reduce_res=r)
        nl.store(out, value=t)
        nl.store(red, value=r)
        return out, red

    a = rand(rng, shape, dtype)
    bi = rand(rng, (shape[0], 1), lo=-1, hi=1)
    y = np.exp(f32(a).astype(np.float64) * -0.5 + bi.reshape((-1,) + (1,) * (len(shape) - 1)))
    out, red = k(a, bi)
    close(out, rounded(y, dtype), dtype)
    close(red, y.reshape(shape[0], -1).sum(axis=1, keepdims=True), np.float32, rtol=1e-4)


# --- negative -----------------------------------------------------------------------

def test_err_tensor_tensor_shape_mismatch(rng):
    @nkicc.jit
    def k(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=t, data1=nl.load(a), data2=nl.load(b), op=nl.add)  # MARK:E140-tt
        nl.store(out, value=t)
        return out

    with pytest.raises(nkicc.NkiccError) as ei:
        k(rand(rng, (128, 37)), rand(rng, (128, 36)))
    check_error(ei, "E140", "MARK:E140-tt", "test_ops_elementwise.py")


def test_err_nl_binary_shapes_do_not_broadcast(rng):
    @nkicc.jit
    def k(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.add(nl.load(a), nl.load(b)))  # MARK:E140-nl
        return out

    with pytest.raises(nkicc.NkiccError) as ei:
        k(rand(rng, (128, 37)), rand(rng, (128, 5)))
    check_error(ei, "E140", "MARK:E140-nl", "test_ops_elementwise.py")


def test_err_tensor_tensor_both_psum(rng):
    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        p = nl.zeros(a.shape, dtype=nl.float32, buffer=nl.psum)
        q = nl.zeros(a.shape, dtype=nl.float32, buffer=nl.psum)
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=t, data1=p, data2=q, op=nl.add)  # MARK:E120-tt
        nl.store(out, value=t)
        return out

    with pytest.raises(nkicc.NkiccError) as ei:
        k(rand(rng, (128, 8)))
    check_error(ei, "E120", "MARK:E120-tt", "test_ops_elementwise.py")


def test_err_elementwise_on_hbm(rng):
    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.exp(a))  # MARK:E120-hbm
        return out

    with pytest.raises(nkicc.NkiccError) as ei:
        k(rand(rng, (128, 8)))
    check_error(ei, "E120", "MARK:E120-hbm", "test_ops_elementwise.py")


def test_err_tensor_scalar_operand_shape(rng):
    @nkicc.jit
    def k(a, c):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=t, data=nl.load(a), op0=nl.add, operand0=nl.load(c))  # MARK:E140-ts
        nl.store(out, value=t)
        return out

    with pytest.raises(nkicc.NkiccError) as ei:
        k(rand(rng, (128, 8)), rand(rng, (128, 2)))
    check_error(ei, "E140", "MARK:E140-ts", "test_ops_elementwise.py")
