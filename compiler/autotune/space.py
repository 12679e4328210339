"""Config spaces: the knobs of one operator template and the points a tuner may choose.

A `ConfigSpace` is the product of its knobs' value lists, minus the points its constraint
rejects (a tile that does not fit an SRAM, a block that does not divide a dimension). A point is
addressed by its flat index (mixed radix over the knobs, first knob most significant) or by its
values, a `{knob: value}` dict of JSON scalars: the form that logs store and schedules read.

Example:
    >>> space = ConfigSpace("demo", [Knob("tile", (1, 2, 4, 8)), Knob("parallel", (False, True))],
    ...                     default={"tile": 4, "parallel": True})
    >>> len(space), space.default.index, space.default.values
    (8, 5, {'tile': 4, 'parallel': True})
    >>> space.get(2).values
    {'tile': 2, 'parallel': False}
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

Scalar = int | bool | str

#: spaces up to this many points are enumerated once, so sampling never repeats a rejected point
ENUMERATE_LIMIT = 1 << 18


class SpaceError(ValueError):
    """A config that is not a point of its space (unknown knob, value not among the choices)."""


@dataclass(frozen=True)
class Knob:
    """One tunable choice: a name and its candidate values (ints, bools or strings).

    The order of `values` is meaningful for numbers: neighbouring values are neighbouring
    points for the explorers.
    """

    name: str
    values: tuple[Scalar, ...]

    def __post_init__(self) -> None:
        if not self.values:
            raise SpaceError(f"knob {self.name!r} must have at least one value")
        if len(set(map(repr, self.values))) != len(self.values):
            raise SpaceError(f"knob {self.name!r} has repeated values: {list(self.values)}")
        for v in self.values:
            if not isinstance(v, int | str):  # bool is an int
                raise SpaceError(f"knob {self.name!r} value {v!r} must be an int, bool or str")

    def position(self, value: Any) -> int:
        for k, v in enumerate(self.values):
            if v == value and type(v) is type(value):
                return k
        # JSON gives ints for bools only if written so; accept an int 0/1 for a bool knob
        for k, v in enumerate(self.values):
            if isinstance(v, bool) and not isinstance(value, bool) and value in (0, 1):
                if bool(value) == v:
                    return k
        raise SpaceError(f"knob {self.name!r} must be one of {list(self.values)}, not {value!r}")

    def numeric(self, k: int) -> float:
        """A number for the value at position `k` (log2 for positive ints, the position for
        strings and bools): the knob's coordinate in feature vectors."""
        v = self.values[k]
        if isinstance(v, bool) or isinstance(v, str):
            return float(k)
        return math.log2(v) if v > 0 else float(v)


@dataclass(frozen=True)
class Config:
    """One point of a space: its flat index and its knob values."""

    space: ConfigSpace
    index: int
    values: dict[str, Scalar]

    def __getitem__(self, name: str) -> Scalar:
        return self.values[name]

    def __repr__(self) -> str:
        return f"Config({self.index}, {self.values})"


class ConfigSpace:
    """The knobs of one template instance, a constraint, and the default point.

    Args:
        name: what the space belongs to (the template), for messages.
        knobs: the knobs, most significant first.
        default: the values of the default config (what the hand-written chooser picks).
        constraint: `values -> None` when valid, else a reason string; invalid points are never
            sampled nor measured.
        retired: knobs an earlier version had: `from_values` drops them, so tuning logs written
            then still load.
        added: knobs a later version added, with the value that configs written before meant:
            `from_values` fills them in when missing, so those logs still load.
    """

    def __init__(
        self,
        name: str,
        knobs: Sequence[Knob],
        default: Mapping[str, Scalar],
        constraint: Callable[[dict[str, Scalar]], str | None] | None = None,
        retired: Sequence[str] = (),
        added: Mapping[str, Scalar] | None = None,
    ) -> None:
        names = [k.name for k in knobs]
        if len(set(names)) != len(names):
            raise SpaceError(f"space {name!r} has repeated knob names: {names}")
        self.name = name
        self.knobs = tuple(knobs)
        self._by_name = {k.name: k for k in self.knobs}
        self._radix = [len(k.values) for k in self.knobs]
        self._constraint = constraint
        self._retired = tuple(retired)
        self._added = dict(added or {})
        self._valid: np.ndarray | None = None
        self.default = self.from_values(default)
        reason = self.why_invalid(self.default.values)
        if reason:
            raise SpaceError(f"space {name!r}: the default config {dict(default)} is invalid: "
                             f"{reason}")  # fmt: skip

    def __len__(self) -> int:
        return math.prod(self._radix)

    def __repr__(self) -> str:
        knobs = ", ".join(f"{k.name}={list(k.values)}" for k in self.knobs)
        return f"ConfigSpace({self.name!r}, {len(self)} points: {knobs})"

    # ---- addressing ------------------------------------------------------------------------

    def positions(self, index: int) -> list[int]:
        """The value position of each knob at flat `index`."""
        if not isinstance(index, int | np.integer) or not 0 <= index < len(self):
            raise SpaceError(f"space {self.name!r}: index must be in [0, {len(self)}), not "
                             f"{index!r}")  # fmt: skip
        out = []
        for r in reversed(self._radix):
            index, p = divmod(int(index), r)
            out.append(p)
        return out[::-1]

    def positions_of(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """`positions` of many flat indices at once (unchecked): one row per index."""
        rest = np.asarray(indices, np.int64).reshape(-1).copy()
        out = np.empty((len(rest), len(self._radix)), np.int64)
        for k in range(len(self._radix) - 1, -1, -1):
            rest, out[:, k] = np.divmod(rest, self._radix[k])
        return out

    def index_of(self, positions: Sequence[int]) -> int:
        index = 0
        for p, r in zip(positions, self._radix, strict=True):
            index = index * r + p
        return index

    def get(self, index: int) -> Config:
        pos = self.positions(index)
        values = {k.name: k.values[p] for k, p in zip(self.knobs, pos, strict=True)}
        return Config(self, int(index), values)

    def from_values(self, values: Mapping[str, Any]) -> Config:
        """The config with these knob values (every knob named, no others but retired ones;
        an added knob not named takes the value configs meant before it existed).

        Raises:
            SpaceError: naming an unknown or missing knob, or a value not among the choices.
        """
        if not isinstance(values, Mapping):
            raise SpaceError(f"space {self.name!r}: a config must be a mapping of knob values, "
                             f"not {type(values).__name__}")  # fmt: skip
        values = {**{k: v for k, v in self._added.items() if k in self._by_name}, **values}
        unknown = sorted(set(values) - set(self._by_name) - set(self._retired))
        missing = [k.name for k in self.knobs if k.name not in values]
        if unknown or missing:
            raise SpaceError(
                f"space {self.name!r}: config {dict(values)} has unknown knobs {unknown} and "
                f"misses {missing}"
            )
        pos = [k.position(values[k.name]) for k in self.knobs]
        return self.get(self.index_of(pos))

    # ---- validity ----------------------------------------------------------------------------

    def why_invalid(self, values: dict[str, Scalar]) -> str | None:
        return self._constraint(values) if self._constraint else None

    def is_valid(self, index: int) -> bool:
        if self._valid is not None:
            return bool(self._valid[index])
        return self.why_invalid(self.get(index).values) is None

    def valid_indices(self) -> np.ndarray | None:
        """Every valid index (sorted), or None when the space is too large to enumerate."""
        if self._valid is None and len(self) <= ENUMERATE_LIMIT:
            mask = np.ones(len(self), bool)
            if self._constraint is not None:
                for i in range(len(self)):
                    mask[i] = self.why_invalid(self.get(i).values) is None
            self._valid = mask
        return None if self._valid is None else np.flatnonzero(self._valid)

    def __iter__(self) -> Iterator[Config]:
        """Every valid config, in index order."""
        valid = self.valid_indices()
        indices = range(len(self)) if valid is None else valid
        for i in indices:
            if valid is not None or self.is_valid(int(i)):
                yield self.get(int(i))

    def sample(
        self, rng: np.random.Generator, n: int = 1, exclude: Collection[int] = frozenset()
    ) -> list[int]:
        """Up to `n` distinct valid indices not in `exclude`, uniformly at random."""
        valid = self.valid_indices()
        if valid is not None:
            pool = valid if not exclude else np.setdiff1d(valid, np.fromiter(exclude, int))
            if len(pool) <= n:
                return [int(i) for i in rng.permutation(pool)]
            return [int(i) for i in rng.choice(pool, n, replace=False)]
        out: list[int] = []
        seen = set(exclude)
        for _ in range(200 * n):
            i = int(rng.integers(len(self)))
            if i not in seen and self.is_valid(i):
                out.append(i)
                if len(out) == n:
                    break
            seen.add(i)
        return out

    def neighbour(self, index: int, rng: np.random.Generator) -> int:
        """A random valid point that differs from `index` in one knob (`index` when none)."""
        pos = self.positions(index)
        movable = [k for k, r in enumerate(self._radix) if r > 1]
        for _ in range(20):
            if not movable:
                break
            k = movable[int(rng.integers(len(movable)))]
            step = int(rng.integers(1, self._radix[k]))
            cand = list(pos)
            cand[k] = (pos[k] + step) % self._radix[k]
            j = self.index_of(cand)
            if self.is_valid(j):
                return j
        return index

    # ---- features ----------------------------------------------------------------------------

    def vector(self, index: int) -> np.ndarray:
        """The knob vector of a point: each knob's numeric coordinate (`Knob.numeric`)."""
        pos = self.positions(index)
        return np.array([k.numeric(p) for k, p in zip(self.knobs, pos, strict=True)], np.float32)

    def distance(self, a: int, b: int) -> int:
        """How many knobs differ between two points (the diversity measure of batch choice)."""
        return sum(x != y for x, y in zip(self.positions(a), self.positions(b), strict=True))


def divisors(n: int, limit: int | None = None) -> tuple[int, ...]:
    """The divisors of `n` up to `limit`, ascending."""
    top = n if limit is None else min(n, limit)
    return tuple(d for d in range(1, top + 1) if n % d == 0)
