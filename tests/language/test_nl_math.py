"""The nl math functions of the NKI 0.6 reference that nkicc builds on
nisa.activation / tensor_tensor / tensor_scalar, against numpy on random data
(derivatives against central differences of the numpy function), plus nl.all,
nl.rms_norm, nl.shared_identity_matrix, nl.no_reorder and broadcast_to(dtype)."""
import math

import numpy as np
import pytest

import nkicc
import nkicc.isa as nisa
import nkicc.language as nl
from tests.support.ops_helpers import bf16, check_error, close, f32, rand, rounded

api = pytest.mark.api
_erf = np.vectorize(math.erf, otypes=[np.float64])


def _sig(x):
    return 1.0 / (1.0 + np.exp(-x))


def _gelu(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def _softplus(x):
    return np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0)


def _derivative(f):
    h = 1e-5
    return lambda x: (f(x + h) - f(x - h)) / (2 * h)


# name -> (numpy oracle in float64, low, high)
UNARY = {
    "erf": (_erf, -3, 3),
    "erf_dx": (_derivative(_erf), -3, 3),
    "gelu_dx": (_derivative(_gelu), -4, 4),
    "gelu_apprx_sigmoid": (lambda x: x * _sig(1.702 * x), -4, 4),
    "gelu_apprx_sigmoid_dx": (_derivative(lambda x: x * _sig(1.702 * x)), -4, 4),
    "silu_dx": (_derivative(lambda x: x * _sig(x)), -5, 5),
    "softplus": (_softplus, -30, 30),
    "mish": (lambda x: x * np.tanh(_softplus(x)), -6, 6),
    "tan": (np.tan, -1.4, 1.4),
    "arctan": (np.arctan, -20, 20),
    "trunc": (np.trunc, -5, 5),
}


def unary_kernel(fn, dtype=None):
    @nkicc.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=dtype or a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=fn(nl.load(a), dtype=dtype))
        return out
    return k


@api("nl.erf", "nl.erf_dx", "nl.gelu_dx", "nl.gelu_apprx_sigmoid", "nl.gelu_apprx_sigmoid_dx", "nl.silu_dx",
     "nl.softplus", "nl.mish", "nl.tan", "nl.arctan", "nl.trunc")
@pytest.mark.parametrize("shape", [(128, 37), (1, 1), (3, 4, 5)], ids=["128x37", "1x1", "3d"])
@pytest.mark.parametrize("op", list(UNARY))
def test_unary_math(rng, op, shape):
    ref, lo, hi = UNARY[op]
    a = rand(rng, shape, np.float32, lo, hi)
    if op == "trunc":
        a.flat[: min(a.size, 3)] = [2.0, -2.0, -0.5][: min(a.size, 3)]  # exact integers and a negative fraction
    got = unary_kernel(getattr(nl, op))(a)
    close(got, ref(f32(a).astype(np.float64)), np.float32, rtol=1e-4, atol=1e-5)


@api("nl.erf", "nl.softplus", "nl.mish")
def test_unary_math_bf16_in_fp32_out(rng):
    a = rand(rng, (64, 33), bf16, -3, 3)
    for op in ("erf", "softplus", "mish"):
        got = unary_kernel(getattr(nl, op), dtype=nl.float32)(a)
        assert got.dtype == np.float32
        close(got, UNARY[op][0](f32(a).astype(np.float64)), np.float32, rtol=1e-4, atol=1e-5)


@api("nl.logical_not")
def test_logical_not(rng):
    a = rand(rng, (128, 40), np.float32)
    a[rng.random(a.shape) < 0.4] = 0.0
    close(unary_kernel(nl.logical_not)(a), (a == 0).astype(np.float64), np.float32)
    b = rand(rng, (16, 9), np.int32, -2, 2)
    close(unary_kernel(nl.logical_not)(b), (b == 0).astype(np.int32), np.int32)


@api("nl.invert")
def test_invert_signed_integers(rng):
    for dtype in (np.int32, np.int16, np.int8):
        a = rand(rng, (32, 17), dtype, -100, 100)
        close(unary_kernel(nl.invert)(a), np.invert(a), dtype)


def test_invert_refuses_floats_and_unsigned(rng):
    with pytest.raises(nkicc.NkiccError) as e:
        unary_kernel(nl.invert)(rand(rng, (4, 4)))
    assert e.value.code == "E103" and "integer" in e.value.message
    with pytest.raises(nkicc.NkiccError) as e:
        unary_kernel(nl.invert)(rand(rng, (4, 4), np.uint8, 0, 9))
    assert e.value.code == "E160"


# --- binary ------------------------------------------------------------------------

def _abs_pick(bigger):
    def f(x, y):
        x, y = np.broadcast_arrays(x, y)
        return np.where(np.abs(x) > np.abs(y) if bigger else np.abs(x) < np.abs(y), x, y)
    return f


BINARY = {"abs_max": _abs_pick(True), "abs_min": _abs_pick(False), "fmod": np.fmod, "mod": np.mod}


def binary_kernel(fn):
    @nkicc.jit
    def k(a, b):
        out = nl.ndarray(np.broadcast_shapes(a.shape, b.shape), dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=fn(nl.load(a), nl.load(b)))
        return out
    return k


def _operands(rng, op, shape):
    a = rand(rng, shape, np.float32, -6, 6)
    b = rand(rng, shape, np.float32, 0.5, 2.5) * rng.choice([-1, 1], size=shape).astype(np.float32)
    if op.startswith("abs_"):
        b = np.where(rng.random(shape) < 0.2, -a, b).astype(np.float32)  # equal magnitudes: y wins
    return a, b


@api("nl.abs_max", "nl.abs_min", "nl.fmod", "nl.mod")
@pytest.mark.parametrize("shape", [(128, 37), (1, 1)], ids=["128x37", "1x1"])
@pytest.mark.parametrize("op", list(BINARY))
def test_binary_math_tile_tile(trn3, rng, op, shape):
    a, b = _operands(rng, op, shape)
    close(binary_kernel(getattr(nl, op))(a, b), BINARY[op](a.astype(np.float64), b.astype(np.float64)),
          np.float32, rtol=1e-5, atol=1e-5)


@api("nl.abs_max", "nl.abs_min", "nl.fmod", "nl.mod")
@pytest.mark.parametrize("op", list(BINARY))
def test_binary_math_column_and_scalars(trn3, rng, op):
    a, b = _operands(rng, op, (64, 21))
    col = b[:, :1].copy()
    close(binary_kernel(getattr(nl, op))(a, col), BINARY[op](a.astype(np.float64), col.astype(np.float64)),
          np.float32, rtol=1e-5, atol=1e-5)
    fn = getattr(nl, op)

    @nkicc.jit
    def k(x):
        o1 = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        o2 = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(o1, value=fn(nl.load(x), -1.75))
        nl.store(o2, value=fn(3.5, nl.load(x)))     # a scalar x is broadcast to y's shape
        return o1, o2

    divisor = np.where(np.abs(a) < 0.25, 0.75, a).astype(np.float32)
    o1, o2 = k(divisor)
    close(o1, BINARY[op](divisor.astype(np.float64), -1.75), np.float32, rtol=1e-5, atol=1e-5)
    close(o2, BINARY[op](np.full(divisor.shape, 3.5), divisor.astype(np.float64)), np.float32,
          rtol=1e-5, atol=1e-5)


@api("nl.left_shift", "nl.right_shift")
@pytest.mark.parametrize("op", ["left_shift", "right_shift"])
def test_shifts(rng, op):
    a = rand(rng, (128, 30), np.int32, -1000, 1000)
    s = rand(rng, (128, 30), np.int32, 0, 6)
    ref = getattr(np, op)
    close(binary_kernel(getattr(nl, op))(a, s), ref(a, s), np.int32)

    @nkicc.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=getattr(nl, op)(nl.load(x), 3))
        return out

    close(k(a), ref(a, 3), np.int32)


# --- reductions, normalisation, constants ---------------------------------------------

@api("nl.all")
def test_all(rng):
    x = (rng.random((128, 6, 5)) < 0.9).astype(np.float32) * rand(rng, (128, 6, 5), np.float32, 0.5, 2)
    x[:10] = 1.5  # some rows all nonzero
    x[10:20, 2, 3] = -0.0

    @nkicc.jit
    def k(a):
        o1 = nl.ndarray((a.shape[0], a.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
        o2 = nl.ndarray((a.shape[0],), dtype=nl.int32, buffer=nl.shared_hbm)
        t = nl.load(a)
        nl.store(o1, value=nl.all(t, axis=2))
        nl.store(o2, value=nl.all(t, axis=(1, 2), dtype=nl.int32))
        return o1, o2

    o1, o2 = k(x)
    close(o1, np.all(x != 0, axis=2).astype(np.float64), np.float32)
    close(o2, np.all(x != 0, axis=(1, 2)).astype(np.int32), np.int32)
    assert 0 < o2.sum() < 128


@api("nl.rms_norm")
@pytest.mark.parametrize("w_shape", [(128, 96), (1, 96)], ids=["full_w", "row_w"])
def test_rms_norm(rng, w_shape):
    x = rand(rng, (128, 96), np.float32, -3, 3)
    x[5] = 0.0  # epsilon keeps an all-zero row finite
    w = rand(rng, w_shape, np.float32, -2, 2)

    @nkicc.jit
    def k(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.rms_norm(nl.load(a), nl.load(b), axis=1, n=a.shape[1], epsilon=1e-3))
        return out

    x64 = x.astype(np.float64)
    want = x64 / np.sqrt(np.mean(x64 * x64, axis=1, keepdims=True) + 1e-3) * w
    close(k(x, w), want, np.float32, rtol=1e-5, atol=1e-5)


@api("nl.rms_norm")
def test_rms_norm_bf16_and_n_differs_from_width(rng):
    x = rand(rng, (32, 64), bf16)
    w = rand(rng, (32, 64), bf16)

    @nkicc.jit
    def k(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.rms_norm(nl.load(a), nl.load(b), axis=1, n=128))
        return out

    x64, w64 = f32(x).astype(np.float64), f32(w).astype(np.float64)
    want = x64 / np.sqrt(np.sum(x64 * x64, axis=1, keepdims=True) / 128 + 1e-6) * w64
    close(k(x, w), rounded(want, bf16), bf16)


@api("nl.shared_identity_matrix")
@pytest.mark.parametrize("n,dtype", [(128, np.float32), (5, np.uint8), (1, np.float32), (64, bf16)])
def test_shared_identity_matrix(n, dtype):
    @nkicc.jit
    def k(a):
        out = nl.ndarray((n, n), dtype=dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.shared_identity_matrix(n, dtype=dtype))
        return out

    got = k(np.zeros((1, 1), np.float32))
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(f32(got), np.eye(n, dtype=np.float32))


@api("nl.shared_identity_matrix")
def test_identity_into_dst_drives_a_matmul(rng):
    y = rand(rng, (128, 96))

    @nkicc.jit
    def k(b):
        ident = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
        got = nl.shared_identity_matrix(n=128, dtype=nl.float32, dst=ident)
        assert got is ident
        out = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.copy(nl.matmul(ident, nl.load(b), transpose_x=True)))
        return out

    close(k(y), y.astype(np.float64), np.float32)


def test_identity_mistakes():
    @nkicc.jit
    def k(a):
        nl.shared_identity_matrix(129)  # MARK too_big
        return None

    with pytest.raises(nkicc.NkiccError) as e:
        k(np.zeros((1, 1), np.float32))
    check_error(e, "E103", "# MARK too_big", "test_nl_math.py")


@api("nl.no_reorder")
def test_no_reorder_block_runs_in_program_order(rng):
    a = rand(rng, (128, 40))

    @nkicc.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        with nl.no_reorder():
            t = nl.load(x)
            u = nl.multiply(t, 3.0)
            for i in nl.affine_range(2):
                nisa.tensor_scalar(dst=u[:, i * 20:(i + 1) * 20], data=u[:, i * 20:(i + 1) * 20], op0=np.add,
                                   operand0=1.0)
            nl.store(out, value=u)
        return out

    close(k(a), a.astype(np.float64) * 3 + 1, np.float32)


def test_no_reorder_refuses_dynamic_loops(rng):
    @nkicc.jit
    def k(x):
        with nl.no_reorder():  # MARK no_reorder
            for i in nl.dynamic_range(2):
                nl.load(x)
        return None

    with pytest.raises(nkicc.NkiccError) as e:
        k(rand(rng, (4, 4)))
    check_error(e, "E103", "# MARK no_reorder", "test_nl_math.py")

    @nkicc.jit
    def fori(x):
        with nl.no_reorder():  # MARK fori
            nl.fori_loop(0, 2, lambda i: nl.load(x))
        return None

    with pytest.raises(nkicc.NkiccError) as e:
        fori(rand(rng, (4, 4)))
    check_error(e, "E103", "# MARK fori", "test_nl_math.py")


@api("nl.broadcast_to", "nl.zeros_like", "nl.empty_like")
def test_broadcast_to_with_dtype_and_like_keywords(rng):
    a = rand(rng, (64, 1))

    @nkicc.jit
    def k(x):
        o1 = nl.ndarray((64, 9), dtype=nl.bfloat16, buffer=nl.shared_hbm)
        o2 = nl.ndarray((64, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.load(x)
        b = nl.broadcast_to(t, shape=(64, 9), dtype=nl.bfloat16)
        assert b.dtype == nl.bfloat16
        nl.store(o1, value=b)
        z = nl.zeros_like(x=t)
        e = nl.empty_like(x=t, dtype=nl.float32)
        nisa.tensor_tensor(dst=e, data1=z, data2=t, op=np.subtract)
        nl.store(o2, value=e)
        return o1, o2

    o1, o2 = k(a)
    close(o1, rounded(np.broadcast_to(a, (64, 9)), bf16), bf16)
    close(o2, -a.astype(np.float64), np.float32)


@api("nl.device_print")
def test_device_print_shows_the_value_at_that_point(rng, capsys):
    a = rand(rng, (4, 3))

    @nkicc.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(2):
            t = nl.load(x[i * 2:(i + 1) * 2])
            nl.device_print("tile", t)
            nisa.tensor_scalar(dst=t, data=t, op0=np.multiply, operand0=2.0)  # after the print
            nl.store(out[i * 2:(i + 1) * 2], value=t)
        nl.device_print("out row 3:", out[3:4, 1:3])
        return out

    want = ["tile " + np.array2string(a[0:2]), "tile " + np.array2string(a[2:4]),
            "out row 3: " + np.array2string(a[3:4, 1:3] * 2)]
    compiled = nkicc.compile(k, a)
    outputs, report = compiled.simulate({"x": a})
    assert report.prints == want
    assert capsys.readouterr().out.splitlines() == "\n".join(want).splitlines()
    np.testing.assert_array_equal(outputs[compiled.ir.outputs[0]], a * 2)
    compiled.simulate({"x": a}, simulator="reference")
    assert capsys.readouterr().out.splitlines() == "\n".join(want).splitlines()


def test_device_print_mistakes(rng):
    @nkicc.jit
    def k(x):
        p = nl.ndarray((4, 3), dtype=nl.float32, buffer=nl.psum)
        nl.device_print("psum", p)  # MARK psum
        return None

    with pytest.raises(nkicc.NkiccError) as e:
        k(rand(rng, (4, 3)))
    check_error(e, "E120", "# MARK psum", "test_nl_math.py")

    @nkicc.jit
    def k2(x):
        nl.device_print(3, x)  # MARK prefix
        return None

    with pytest.raises(nkicc.NkiccError) as e:
        k2(rand(rng, (4, 3)))
    check_error(e, "E103", "# MARK prefix", "test_nl_math.py")
