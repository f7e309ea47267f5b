"""Exact integer affine expressions over loop variables.

Every address in the IR is an `Affine`: `sum(coeff * var) + const`. Loop
variables count iterations (0 .. trip-1), so a variable's range is always
`[0, trip)`; bounds over a rectangular loop nest are then O(terms).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping


@dataclass(frozen=True)
class Affine:
    terms: tuple[tuple[str, int], ...] = ()
    const: int = 0

    @staticmethod
    def of(value: "int | Affine") -> "Affine":
        if isinstance(value, Affine):
            return value
        return Affine((), int(value))

    @staticmethod
    def var(name: str, coeff: int = 1, const: int = 0) -> "Affine":
        return Affine(((name, coeff),) if coeff else (), const)

    @property
    def is_const(self) -> bool:
        return not self.terms

    @property
    def vars(self) -> tuple[str, ...]:
        return tuple(v for v, _ in self.terms)

    def coeff(self, name: str) -> int:
        for v, c in self.terms:
            if v == name:
                return c
        return 0

    def __add__(self, other: "int | Affine") -> "Affine":
        other = Affine.of(other)
        merged = dict(self.terms)
        for v, c in other.terms:
            merged[v] = merged.get(v, 0) + c
        return Affine(_norm(merged), self.const + other.const)

    __radd__ = __add__

    def __neg__(self) -> "Affine":
        return Affine(tuple((v, -c) for v, c in self.terms), -self.const)

    def __sub__(self, other: "int | Affine") -> "Affine":
        return self + (-Affine.of(other))

    def __rsub__(self, other: "int | Affine") -> "Affine":
        return Affine.of(other) - self

    def scale(self, k: int) -> "Affine":
        if k == 0:
            return Affine((), 0)
        return Affine(tuple((v, c * k) for v, c in self.terms), self.const * k)

    def floordiv_exact(self, k: int) -> "Affine | None":
        """self // k when every coefficient and the constant divide evenly."""
        if k == 0 or self.const % k or any(c % k for _, c in self.terms):
            return None
        return Affine(tuple((v, c // k) for v, c in self.terms), self.const // k)

    def substitute(self, name: str, repl: "Affine") -> "Affine":
        c = self.coeff(name)
        if not c:
            return self
        rest = Affine(tuple(t for t in self.terms if t[0] != name), self.const)
        return rest + repl.scale(c)

    def bind(self, values: Mapping[str, int]) -> "Affine":
        """Replace the variables that have known values; keep the rest."""
        const = self.const
        kept = []
        for v, c in self.terms:
            if v in values:
                const += c * values[v]
            else:
                kept.append((v, c))
        if len(kept) == len(self.terms):
            return self if const == self.const else Affine(self.terms, const)
        return Affine(tuple(kept), const)

    def rename(self, mapping: Mapping[str, str]) -> "Affine":
        return Affine(_norm({mapping.get(v, v): c for v, c in self.terms}), self.const)

    def evaluate(self, env: Mapping[str, int]) -> int:
        total = self.const
        for v, c in self.terms:
            total += c * env[v]
        return total

    def bounds(self, trips: Mapping[str, int]) -> tuple[int, int]:
        """Min and max over vars ranging over [0, trips[v])."""
        lo = hi = self.const
        for v, c in self.terms:
            span = c * (trips[v] - 1)
            if span >= 0:
                hi += span
            else:
                lo += span
        return lo, hi

    def __str__(self) -> str:
        parts: list[str] = []
        for v, c in self.terms:
            if c == 1:
                parts.append(v)
            elif c == -1:
                parts.append(f"-{v}")
            else:
                parts.append(f"{c}*{v}")
        if self.const or not parts:
            parts.append(str(self.const))
        return " + ".join(parts).replace("+ -", "- ")

    def to_json(self) -> list:
        return [[list(t) for t in self.terms], self.const]

    @staticmethod
    def from_json(data: list) -> "Affine":
        terms, const = data
        return Affine(tuple((v, c) for v, c in terms), const)


def _norm(terms: Mapping[str, int]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted((v, c) for v, c in terms.items() if c))
