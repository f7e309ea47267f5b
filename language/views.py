"""Shape algebra of zero-copy views: a view is a list of (step, num) pairs
over its base tensor's row-major storage, so reshaping, splitting, merging
and reordering dimensions is arithmetic on those pairs, never a copy.

The functions here are pure and raise `ViewError` with what is wrong; the
NkiTensor methods turn that into a one-line error at the kernel's line."""
from __future__ import annotations

Pattern = tuple[tuple[int, int], ...]


class ViewError(ValueError):
    pass


def product(sizes) -> int:
    n = 1
    for s in sizes:
        n *= s
    return n


def infer_sizes(sizes, total: int) -> tuple[int, ...]:
    """`sizes` with at most one -1 filled in so that their product is `total`."""
    sizes = [int(s) for s in sizes]
    unknown = [i for i, s in enumerate(sizes) if s == -1]
    if len(unknown) > 1:
        raise ViewError(f"at most one size may be -1, got {sizes}")
    if any(s <= 0 for s in sizes if s != -1):
        raise ViewError(f"sizes must be positive (or one -1), got {sizes}")
    if unknown:
        known = product(s for s in sizes if s != -1)
        if total % known:
            raise ViewError(f"cannot infer -1 in {sizes}: {total} elements are not a multiple of {known}")
        sizes[unknown[0]] = total // known
    if product(sizes) != total:
        raise ViewError(f"sizes {sizes} hold {product(sizes)} elements, not {total}")
    return tuple(sizes)


def split(pair: tuple[int, int], sizes: tuple[int, ...]) -> Pattern:
    """One dimension (step, num) as several, outermost first."""
    step = pair[0]
    out = []
    inner = product(sizes)
    for s in sizes:
        inner //= s
        out.append((step * inner, s))
    return tuple(out)


def merge(pairs: Pattern) -> tuple[int, int] | None:
    """Several adjacent dimensions as one, or None when they are not laid out
    one after the other (each step = the next step * the next count).
    Dimensions of size 1 have no layout and are ignored."""
    real = [p for p in pairs if p[1] != 1]
    count = product(n for _, n in pairs)
    if not real:
        return (pairs[-1][0] if pairs else 1, count)
    for (step, _), (inner_step, inner_num) in zip(real, real[1:]):
        if step != inner_step * inner_num:
            return None
    return (real[-1][0], count)


def reshape(pattern: Pattern, shape: tuple[int, ...]) -> Pattern | None:
    """The pattern of `shape` over the same elements in the same order, or None
    when that needs a copy. Old and new dimensions are matched into groups of
    equal element count; a group of old dimensions must merge (be laid out
    contiguously) to be split into its new ones."""
    old = [p for p in pattern if p[1] != 1]
    out: list[tuple[int, int]] = []
    i = 0
    j = 0
    new = list(shape)
    while j < len(new):
        if new[j] == 1:
            out.append((0, 1))
            j += 1
            continue
        # smallest groups old[i:i2], new[j:j2] with equal products
        i2, j2 = i + 1, j + 1
        if i >= len(old):
            return None
        a, b = old[i][1], new[j]
        while a != b:
            if a < b:
                if i2 >= len(old):
                    return None
                a *= old[i2][1]
                i2 += 1
            else:
                if j2 >= len(new):
                    return None
                b *= new[j2]
                j2 += 1
        merged = merge(tuple(old[i:i2]))
        if merged is None:
            return None
        sizes = tuple(new[j:j2])
        out.extend(split(merged, sizes))
        i, j = i2, j2
    if i != len(old):
        return None
    return tuple(out)


def permute(pattern: Pattern, dims) -> Pattern:
    dims = tuple(int(d) for d in dims)
    if sorted(dims) != list(range(len(pattern))):
        raise ViewError(f"permute dims {list(dims)} are not a permutation of 0..{len(pattern) - 1}")
    return tuple(pattern[d] for d in dims)


def _names(pattern, what: str) -> list[tuple[str, ...]]:
    """('b', ('h', 'w')) -> [('b',), ('h', 'w')]: the names of each dimension."""
    out = []
    for item in pattern:
        group = (item,) if isinstance(item, str) else tuple(item)
        if not group or not all(isinstance(n, str) for n in group):
            raise ViewError(f"{what} pattern entries are names or tuples of names, got {item!r}")
        out.append(group)
    return out


def rearrange(pattern: Pattern, src, dst, fixed: dict | None) -> Pattern:
    """einops-style: split the source dimensions into named axes, reorder them
    as the destination names them, and merge the destination's groups."""
    src_groups, dst_groups = _names(src, "source"), _names(dst, "destination")
    if len(src_groups) != len(pattern):
        raise ViewError(f"source pattern {src!r} names {len(src_groups)} dimensions, the tensor has {len(pattern)}")
    src_names = [n for g in src_groups for n in g]
    dst_names = [n for g in dst_groups for n in g]
    if len(set(src_names)) != len(src_names) or sorted(src_names) != sorted(dst_names):
        raise ViewError(f"source {src!r} and destination {dst!r} must name the same axes, each once")
    fixed = dict(fixed or {})
    axes: dict[str, tuple[int, int]] = {}
    for group, pair in zip(src_groups, pattern):
        sizes = infer_sizes([fixed.get(n, -1) for n in group], pair[1])
        for name, p in zip(group, split(pair, sizes)):
            axes[name] = p
    out = []
    for group in dst_groups:
        merged = merge(tuple(axes[n] for n in group))
        if merged is None:
            raise ViewError(f"axes {group} are not contiguous in memory and cannot be merged without a copy")
        out.append(merged)
    return tuple(out)


def is_contiguous(pattern: Pattern, skip_partition: bool) -> bool:
    """Row-major and dense: each dimension (other than size 1) steps over
    exactly the elements of the dimensions inside it."""
    pairs = pattern[1:] if skip_partition else pattern
    inner = 1
    for step, num in reversed(pairs):
        if num != 1 and step != inner:
            return False
        inner *= num
    return True
