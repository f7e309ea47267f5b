"""Partition rules: at most 128 partitions (E110), legal start partitions (E111)."""
import nkicc
import nkicc.isa as nisa
import nkicc.language as nl


@nkicc.jit
def sbuf_tile_256_partitions(a: "float32[256,64]"):
    out = nl.ndarray((256, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((256, 64), dtype=nl.float32, buffer=nl.sbuf)  # EXPECT: E110
    nl.store(out, value=t)
    return out


@nkicc.jit
def load_of_256_rows(a: "float32[256,64]"):
    out = nl.ndarray((256, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)  # EXPECT: E110
    nl.store(out, value=t)
    return out


@nkicc.jit
def psum_tile_129_partitions(a: "float32[128,8]"):
    out = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    ps = nl.zeros((129, 8), dtype=nl.float32, buffer=nl.psum)  # EXPECT: E110
    nl.store(out, value=nl.copy(ps[0:128, :]))
    return out


@nkicc.jit
def start_at_partition_1(a: "float32[128,64]"):
    out = nl.ndarray((64, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    u = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=u, src=t[1:65, :])  # EXPECT: E111
    nl.store(out, value=u)
    return out


@nkicc.jit
def ninety_six_partitions_from_32(a: "float32[128,64]"):
    out = nl.ndarray((96, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    u = nl.ndarray((96, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=u, src=t[32:128, :])  # EXPECT: E111
    nl.store(out, value=u)
    return out


@nkicc.jit
def sixteen_partitions_from_16(a: "float32[128,64]"):
    out = nl.ndarray((16, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    u = nl.ndarray((16, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=u, src=t[16:32, :])  # EXPECT: E111
    nl.store(out, value=u)
    return out


@nkicc.jit
def loop_start_not_a_multiple_of_32(a: "float32[128,64]"):
    out = nl.ndarray((64, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    for i in nl.affine_range(2):
        u = nl.ndarray((32, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=u, src=t[i * 48:i * 48 + 32, :])  # EXPECT: E111
        nl.store(out[i * 32:(i + 1) * 32, :], value=u)
    return out
