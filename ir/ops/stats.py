"""Batch-norm statistics on the Vector Engine: `bn_stats` summarises up to 512
elements per partition as (count, mean, variance * count) of its even and its
odd elements; `bn_aggr` merges any number of such triples into a mean and a
(population) variance. The arithmetic is fp32 on the hardware; here float64,
rounded to the destination dtype on the write."""
from __future__ import annotations

import numpy as np

from ..errors import NkiccError
from ..nodes import Op
from .checks import free, on_chip_tensors
from .core import Emit, instruction
from .tile_rules import free_between, free_is, input_streaming_cost, same_partitions
from .values import tile

# elements per partition one bn_stats reads (nl.tile_size.bn_stats_fmax)
BN_STATS_FMAX = 512


def _summary(x: np.ndarray) -> np.ndarray:
    """(count, mean, sum of squared deviations) per row; an empty half is (0, 0, 0)."""
    count = x.shape[1]
    if count == 0:
        return np.zeros((x.shape[0], 3))
    mean = x.mean(axis=1)
    m2 = ((x - mean[:, None]) ** 2).sum(axis=1)
    return np.stack([np.full(x.shape[0], float(count)), mean, m2], axis=1)


def _bn_stats(op: Op, read):
    x = tile(op.ins[0], read).astype(np.float64)
    return [(0, np.concatenate([_summary(x[:, 0::2]), _summary(x[:, 1::2])], axis=1))]


@instruction(family="stats", compute=_bn_stats, cost=input_streaming_cost)
def bn_stats(dst, data, name=None):
    """Per partition of `data` (at most 512 elements, free axes flattened), six
    numbers into dst: count, mean and variance * count of the even-indexed
    elements, then the same of the odd-indexed ones. Feed one or more of these
    [P, 6] results to `bn_aggr` for the mean and variance. Vector Engine; fp32
    arithmetic, the result converted to dst's dtype."""
    dst, data = on_chip_tensors({"dst": dst, "data": data}, "bn_stats")
    same_partitions(dst, data, "bn_stats")
    free_between(data, 1, BN_STATS_FMAX, "bn_stats data")
    free_is(dst, 6, "bn_stats dst")
    return Emit([dst], [data])


def _bn_aggr(op: Op, read):
    t = tile(op.ins[0], read).astype(np.float64)
    t = t.reshape(t.shape[0], -1, 3)
    count, mean, m2 = t[..., 0], t[..., 1], t[..., 2]
    total = count.sum(axis=1)
    safe = np.where(total > 0, total, 1.0)
    # Chan et al.'s merge of partial moments: exact for any split of the data
    mu = (count * mean).sum(axis=1) / safe
    var = (m2.sum(axis=1) + (count * (mean - mu[:, None]) ** 2).sum(axis=1)) / safe
    return [(0, np.stack([np.where(total > 0, mu, 0.0), np.where(total > 0, var, 0.0)], axis=1))]


@instruction(family="stats", compute=_bn_aggr, cost=input_streaming_cost)
def bn_aggr(dst, data, name=None):
    """Merge (count, mean, variance * count) triples - the outputs of one or
    more `bn_stats`, side by side in the free dimension - into two numbers per
    partition: the mean and the (population) variance of all the elements they
    summarise. Vector Engine; fp32 arithmetic, the result converted to dst's
    dtype. Triples with count 0 contribute nothing; all-zero counts give 0, 0."""
    dst, data = on_chip_tensors({"dst": dst, "data": data}, "bn_aggr")
    same_partitions(dst, data, "bn_aggr")
    n = free(data)
    if n == 0 or n % 3:
        raise NkiccError("E140", f"bn_aggr data holds {n} elements per partition, not a whole number of "
                                 "(count, mean, variance*count) triples", None,
                         "pass bn_stats outputs: 6 elements per bn_stats, side by side")
    free_is(dst, 2, "bn_aggr dst")
    return Emit([dst], [data])
