"""Random programs over the tracer's op set, as an op tree that prints both as
a symdiff program (numpy) and as its JAX twin.

One seed gives one program.  Expression nodes are templates over ``{ns}``
(``np`` or ``jnp``) and their children's source, so the two texts come from the
same tree; statements that numpy runs in place (``x += e``, ``x[a:b] = e``,
``np.add.at``, ``sd.map`` loops) print as functional JAX updates (``.at[]``,
vectorised slices).  Programs return a scalar (a sum over some of their
arrays), so ``value_and_grad`` applies; a fraction are checked to second order
(``grad_program(...).vjp``).  Local arrays are never views of another array
(a view on the right of ``=`` is copied), so numpy's aliasing never differs from
JAX's value semantics.
"""
from __future__ import annotations

import itertools
import zlib
from dataclasses import dataclass, field

import numpy as np

MAX_DIM = 6           # extent per axis of generated shapes (kernels stay small: compile time dominates)
MAX_NDIM = 3
EDGE_VALUES = (-1.0, 0.0, 0.0, 0.5, 1.0, 2.0)   # ties, zeros and repeats
LARGE = (33, 257, 1031, 4099)                    # one axis of some statements' shapes in 10% of programs

# ---------------------------------------------------------------- expression nodes


@dataclass
class Node:
    """An expression: ``tpl`` formats with its children's sources and ``ns``;
    ``jtpl`` replaces it in JAX when the texts differ; ``refs`` are the index
    arguments the template names itself."""
    tpl: str
    kids: list
    shape: tuple
    jtpl: str | None = None
    refs: tuple = ()
    view: bool = False    # may share memory with a named array (numpy view)

    def src(self, ns: str, ctx: "MapCtx | None" = None) -> str:
        tpl = self.jtpl if ns == "jnp" and self.jtpl is not None else self.tpl
        if ns == "jnp":
            tpl = tpl.replace("{ns}.abs(", "_abs(")   # symdiff's abs'(0) = 0 (docs/guide.md), JAX's is 1
        return tpl.format(*(k.src(ns, ctx) for k in self.kids), ns=ns)

    def names(self) -> set[str]:
        return set(self.refs).union(*(k.names() for k in self.kids))


@dataclass
class Arg(Node):
    """A named array (argument or local)."""

    def __init__(self, name: str, shape: tuple):
        super().__init__("", [], shape, view=True)
        self.name = name

    def src(self, ns, ctx=None):
        return self.name

    def names(self):
        return {self.name}


@dataclass
class MapCtx:
    ranges: list   # [(lo, hi)] per domain axis


SYMS = "ijk"


def _offset(sym: str, c: int) -> str:
    return sym if c == 0 else f"{sym} + {c}" if c > 0 else f"{sym} - {-c}"


class MRead(Node):
    """``a[i + c, 2, j - 1]`` inside an sd.map body; ``dims`` holds (axis, offset)
    or (None, constant index) per dimension of ``a``."""

    def __init__(self, name: str, dims: list):
        super().__init__("", [], ())
        self.name, self.dims = name, dims

    def src(self, ns, ctx=None):
        if ns == "np":
            return f"{self.name}[{', '.join(_offset(SYMS[k], c) if k is not None else str(c) for k, c in self.dims)}]"
        axes = [k for k, _ in self.dims if k is not None]
        key = ", ".join(f"{ctx.ranges[k][0] + c}:{ctx.ranges[k][1] + c}" if k is not None else str(c)
                        for k, c in self.dims)
        return f"_bc({self.name}[{key}], {tuple(axes)}, {len(ctx.ranges)})"

    def names(self):
        return {self.name}


class MGather(Node):
    """``a[idx[i + c]]`` inside an sd.map body (a computed index)."""

    def __init__(self, name: str, idx: str, axis: int, c: int):
        super().__init__("", [], ())
        self.name, self.idx, self.axis, self.c = name, idx, axis, c

    def src(self, ns, ctx=None):
        if ns == "np":
            return f"{self.name}[{self.idx}[{_offset(SYMS[self.axis], self.c)}]]"
        lo, hi = ctx.ranges[self.axis]
        return f"_bc({self.name}[{self.idx}[{lo + self.c}:{hi + self.c}]], ({self.axis},), {len(ctx.ranges)})"

    def names(self):
        return {self.name, self.idx}


def const(v: float) -> Node:
    return Node(repr(float(v)), [], ())


# ---------------------------------------------------------------- statements


@dataclass
class Assign:
    var: str
    expr: Node
    copy: bool = False   # the expression is a view: store a copy

    def lines(self, ns):
        e = self.expr.src(ns)
        return [f"{self.var} = {ns}.copy({e})" if self.copy else f"{self.var} = {e}"]

    def kids(self):
        return [self.expr]


_AT = {"+": "add", "*": "multiply", "=": "set"}


@dataclass
class Update:
    """``v[key] op= e`` / ``v op= e`` / ``v[key] = e``."""
    var: str
    key: str | None
    op: str            # "+", "-", "*", "="
    expr: Node

    def lines(self, ns):
        e = self.expr.src(ns)
        if ns == "np":
            target = self.var if self.key is None else f"{self.var}[{self.key}]"
            return [f"{target} {'' if self.op == '=' else self.op}= {e}"]
        if self.key is None:
            return [f"{self.var} = {self.var} {self.op} ({e})"]
        op, e = ("add", f"-({e})") if self.op == "-" else (_AT[self.op], e)
        return [f"{self.var} = {self.var}.at[{self.key}].{op}({e})"]

    def kids(self):
        return [self.expr]


@dataclass
class Loop:
    times: int
    body: list

    def lines(self, ns):
        return [f"for _t in range({self.times}):"] + ["    " + ln for s in self.body for ln in s.lines(ns)]

    def kids(self):
        return []


def _zeros(ns, var, shape):
    return f"{var} = np.zeros({shape})" if ns == "np" else f"{var} = jnp.zeros({shape}, dtype=DT)"


@dataclass
class MapStmt:
    """``for i, j in sd.map[...]: t[i + o, j] = e`` or ``t[...] += e`` (an
    accumulation over the loop axes the target index does not name)."""
    var: str
    create: tuple | None          # shape of a new np.zeros target
    ranges: list                  # [(lo, hi)]
    tdims: list                   # per target dim: (axis, offset) or (None, constant)
    acc: bool
    body: Node

    def lines(self, ns):
        out = [] if self.create is None else [_zeros(ns, self.var, self.create)]
        nd = len(self.ranges)
        if ns == "np":
            head = ", ".join(SYMS[:nd])
            rng = ", ".join(f"{lo}:{hi}" for lo, hi in self.ranges)
            key = ", ".join(_offset(SYMS[k], c) if k is not None else str(c) for k, c in self.tdims)
            out += [f"for {head} in sd.map[{rng}]:",
                    f"    {self.var}[{key}] {'+=' if self.acc else '='} {self.body.src('np')}"]
            return out
        ctx = MapCtx(self.ranges)
        dshape = tuple(hi - lo for lo, hi in self.ranges)
        value = f"jnp.broadcast_to({self.body.src('jnp', ctx)}, {dshape})"
        named = [k for k, _ in self.tdims if k is not None]
        summed = tuple(k for k in range(nd) if k not in named)
        if summed:
            value = f"jnp.sum({value}, axis={summed})"
        kept = sorted(named)
        perm = [kept.index(k) for k in named]
        if perm != sorted(perm):
            value = f"jnp.transpose({value}, {tuple(perm)})"
        key = ", ".join(f"{self.ranges[k][0] + c}:{self.ranges[k][1] + c}" if k is not None else str(c)
                        for k, c in self.tdims)
        out.append(f"{self.var} = {self.var}.at[{key}].{'add' if self.acc else 'set'}({value})")
        return out

    def kids(self):
        return [self.body]


@dataclass
class Scatter:
    """``np.add.at(t, idx, v)``."""
    var: str
    create: tuple | None
    idx: str
    expr: Node

    def lines(self, ns):
        out = [] if self.create is None else [_zeros(ns, self.var, self.create)]
        e = self.expr.src(ns)
        out.append(f"np.add.at({self.var}, {self.idx}, {e})" if ns == "np"
                   else f"{self.var} = {self.var}.at[{self.idx}].add({e})")
        return out

    def kids(self):
        return [self.expr]


def stmt_names(s) -> set[str]:
    """Every name a statement reads or writes."""
    names = set()
    for k in s.kids():
        names |= k.names()
    if isinstance(s, Loop):
        for b in s.body:
            names |= stmt_names(b)
    if isinstance(s, (Update, MapStmt, Scatter)):
        names.add(s.var)
    if isinstance(s, Scatter):
        names.add(s.idx)
    return names


# ---------------------------------------------------------------- programs


@dataclass
class Program:
    seed: int
    floats: dict                  # name -> shape
    indices: dict                 # name -> (length, bound)
    stmts: list
    ret: list                     # [(name, "sum" | "mean")]
    edge: bool = False
    second: str | None = None     # second order: d/d(all) of <cotangent, d value / d second>
    locals_: dict = field(default_factory=dict)   # name -> shape

    def params(self) -> list[str]:
        return list(self.floats) + list(self.indices)

    def _signature(self, ns: str) -> str:
        if ns == "jnp":
            return ", ".join(self.params())
        parts = [f"{n}: F[{', '.join(map(str, s))}]" if s else f"{n}: F" for n, s in self.floats.items()]
        parts += [f"{n}: sd.i32[{length}]" for n, (length, _) in self.indices.items()]
        return ", ".join(parts)

    def body_lines(self, ns: str) -> list[str]:
        lines = [ln for s in self.stmts for ln in s.lines(ns)]
        terms = [f"{ns}.{how}({n})" for n, how in self.ret] or ["0.0"]
        return lines + [f"return {' + '.join(terms)}"]

    def numpy_source(self) -> str:
        """The symdiff program; ``F`` is ``sd.f32`` or ``sd.f64`` (bound by the runner)."""
        body = "\n".join("    " + ln for ln in self.body_lines("np"))
        return f"@sd.differentiable_program\ndef prog({self._signature('np')}):\n{body}\n"

    def jax_source(self) -> str:
        body = "\n".join("    " + ln for ln in self.body_lines("jnp"))
        return f"def prog_jax({self._signature('jnp')}):\n{body}\n"

    def used(self) -> set[str]:
        names = {n for n, _ in self.ret}
        for s in self.stmts:
            names |= stmt_names(s)
        return names


def make_inputs(prog: Program, data_seed: int | None = None) -> dict[str, np.ndarray]:
    """Float32-representable values per argument name (stable when a minimiser
    removes or adds other arguments) and in-range int32 indices."""
    seed = prog.seed if data_seed is None else data_seed
    out = {}
    for name, shape in prog.floats.items():
        rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
        if prog.edge:
            v = rng.choice(EDGE_VALUES, size=shape)
        else:
            v = rng.standard_normal(shape)
        out[name] = np.asarray(v, dtype=np.float32)
    for name, (length, bound) in prog.indices.items():
        rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
        out[name] = rng.integers(0, bound, size=length).astype(np.int32)
    return out


# ---------------------------------------------------------------- generator

UNARY = [
    "{ns}.sin({0})", "{ns}.cos({0})", "{ns}.tanh({0})", "{ns}.arctan({0})", "(-{0})", "{ns}.square({0})",
    "({0} ** 2)", "({0} ** 3)", "{ns}.abs({0})", "{ns}.exp({ns}.sin({0}))", "{ns}.log({0} * {0} + 0.5)",
    "{ns}.sqrt({ns}.abs({0}) + 0.1)", "{ns}.log1p({ns}.abs({0}))", "{ns}.expm1({ns}.tanh({0}))",
    "{ns}.sinh({ns}.tanh({0}))", "{ns}.cosh({ns}.tanh({0}))", "{ns}.arcsin(0.9 * {ns}.tanh({0}))",
    "{ns}.arccos(0.9 * {ns}.tanh({0}))", "{ns}.reciprocal({0} * {0} + 1.0)", "(0.5 * {ns}.tanh({0}) + 0.5)",
    "{ns}.maximum({0}, 0.0)", "{ns}.minimum({0}, 0.5)", "{ns}.clip({0}, -0.5, 0.7)", "{ns}.floor({0})",
    "{ns}.sign({0})", "{ns}.cbrt({ns}.abs({0}) + 0.1)", "{ns}.log2({0} * {0} + 1.0)",
    "{ns}.exp2({ns}.tanh({0}))", "{ns}.tan(0.5 * {ns}.tanh({0}))", "(2.0 * {0})", "({0} - 1.5)",
    "{ns}.arctanh(0.9 * {ns}.tanh({0}))", "{ns}.arcsinh({0})", "{ns}.log10({ns}.abs({0}) + 0.5)",
    "(({0} * {0} + 0.5) ** -1.5)", "{ns}.exp(-{0} * {0})", "({0} / 3.0)",
]
BINARY = [
    "({0} + {1})", "({0} - {1})", "({0} * {1})", "({0} / ({1} * {1} + 0.5))", "{ns}.maximum({0}, {1})",
    "{ns}.minimum({0}, {1})", "{ns}.arctan2({0}, {ns}.abs({1}) + 0.5)", "{ns}.hypot({0}, {ns}.abs({1}) + 0.5)",
    "(({ns}.abs({0}) + 0.5) ** {ns}.tanh({1}))", "{ns}.where({0} > {1}, {0}, {1})",
    "{ns}.where({0} > 0, {1}, 0.3 * {1})", "({0} + 2.0 * {1})", "(({0} > 0) * {1})",
    "{ns}.where(({0} > 0) & ({1} < 0.5), {0}, -{1})",
]
COMPARE = [">", "<", ">=", "<="]
REDUCE = ["sum", "mean", "max", "min", "prod"]


def _divisor_shapes(size: int) -> list[tuple]:
    out = []
    for nd in (1, 2, 3):
        for dims in itertools.product(range(1, 9), repeat=nd):
            if int(np.prod(dims)) == size:
                out.append(dims)
    return out


class Generator:
    """Builds one random program; ``rng`` decides everything."""

    def __init__(self, seed: int):
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.floats: dict[str, tuple] = {}
        self.indices: dict[str, tuple] = {}
        self.locals: dict[str, tuple] = {}
        self.counter = itertools.count()
        self.pool = [int(v) for v in self.rng.integers(1, MAX_DIM + 1, size=3)]
        self.frozen: set[str] = set()   # views and their bases: never updated in place (aliasing)
        self.large = self.pick(LARGE) if self.p(0.1) else 0

    # -- helpers
    def p(self, prob: float) -> bool:
        return bool(self.rng.random() < prob)

    def pick(self, seq):
        return seq[int(self.rng.integers(len(seq)))]

    def extent(self) -> int:
        """Mostly one of the program's few extents, so that shapes meet (dataflow, not islands)."""
        return self.pick(self.pool) if self.p(0.8) else int(self.rng.integers(1, MAX_DIM + 1))

    def rand_shape(self, ndim: int | None = None) -> tuple:
        if ndim is None:
            ndim = self.pick([0, 1, 1, 2, 2, 2, 3])
        shape = [self.extent() for _ in range(ndim)]
        if shape and self.large and self.p(0.5):
            shape[int(self.rng.integers(ndim))] = self.large
        return tuple(shape)

    def new_float(self, shape: tuple) -> Arg:
        name = f"x{len(self.floats)}"
        self.floats[name] = tuple(shape)
        return Arg(name, tuple(shape))

    def new_index(self, length: int, bound: int) -> str:
        name = f"i{len(self.indices)}"
        self.indices[name] = (int(length), int(bound))
        return name

    def new_local(self, shape: tuple) -> str:
        name = f"v{next(self.counter)}"
        self.locals[name] = tuple(shape)
        return name

    def arrays(self) -> dict[str, tuple]:
        return {**self.floats, **self.locals}

    # -- leaves
    def fit_slice(self, big: int, n: int) -> str | None:
        """A basic slice of length ``n`` of an axis of length ``big``."""
        options = []
        for step in (1, 2, 3, -1, -2):
            span = (n - 1) * abs(step) + 1
            if span <= big:
                options.append(step)
        if not options:
            return None
        step = self.pick(options)
        span = (n - 1) * abs(step) + 1
        start = int(self.rng.integers(0, big - span + 1))
        if step > 0:
            stop = start + span
            a = "" if start == 0 and self.p(0.5) else str(start)
            b = "" if stop == big and self.p(0.5) else (str(stop - big) if stop < big and self.p(0.3) else str(stop))
            return f"{a}:{b}" + ("" if step == 1 else f":{step}")
        first = start + span - 1              # walk down from `first` to `start`
        stop = start - 1
        b = "" if stop < 0 else str(stop)
        return f"{first}:{b}:{step}"

    def leaf(self, shape: tuple) -> Node:
        same = [n for n, s in self.arrays().items() if s == shape]
        bigger = [n for n, s in self.arrays().items() if len(s) == len(shape) and len(s) > 0
                  and all(b >= d for b, d in zip(s, shape))]
        r = self.rng.random()
        if same and r < 0.45:
            n = self.pick(same)
            return Arg(n, self.arrays()[n])
        if bigger and r < 0.75:
            n = self.pick(bigger)
            src = self.arrays()[n]
            keys = [self.fit_slice(b, d) for b, d in zip(src, shape)]
            if all(k is not None for k in keys) and any(k != ":" for k in keys):
                return Node(f"{n}[{', '.join(keys)}]", [], shape, refs=(n,), view=True)
            return Arg(n, src) if src == shape else self.new_float(shape)
        if len(self.floats) >= 6 and same:
            n = self.pick(same)
            return Arg(n, self.arrays()[n])
        return self.new_float(shape)

    # -- expressions
    def sub_broadcast(self, shape: tuple) -> tuple:
        """A shape that broadcasts to ``shape`` (leading axes dropped, some 1s)."""
        drop = int(self.rng.integers(0, len(shape) + 1)) if self.p(0.4) else 0
        out = tuple(1 if self.p(0.25) else d for d in shape[drop:])
        return out

    def operand(self, shape: tuple, depth: int) -> Node:
        if self.p(0.12):
            return const(self.pick([0.5, 2.0, -1.0, 1.5, 0.0, 3.0]))
        if self.p(0.3):
            return self.expr(self.sub_broadcast(shape), depth)
        return self.expr(shape, depth)

    def expr(self, shape: tuple, depth: int) -> Node:
        if depth <= 0 or self.p(0.2):
            return self.leaf(shape)
        kinds = ["unary"] * 4 + ["binary"] * 4 + ["where", "clip", "reduce", "reduce", "view", "view", "concat"]
        if len(shape) <= 3:
            kinds += ["matmul", "matmul"]
        if shape:
            kinds += ["gather"]
        kinds += ["einsum", "reshuffle", "diagonal", "select", "scan"]   # issue 31's operations
        for _ in range(4):
            node = getattr(self, "gen_" + self.pick(kinds))(shape, depth - 1)
            if node is not None:
                return node
        return self.leaf(shape)

    def gen_unary(self, shape, depth):
        return Node(self.pick(UNARY), [self.expr(shape, depth)], shape)

    def gen_binary(self, shape, depth):
        a, b = self.expr(shape, depth), self.operand(shape, depth)
        if self.p(0.5):
            a, b = b, a
        return Node(self.pick(BINARY), [a, b], shape)

    def gen_where(self, shape, depth):
        kids = [self.operand(shape, depth) for _ in range(4)]
        kids[self.pick([2, 3])] = self.expr(shape, depth)   # the result has the full shape
        return Node(f"{{ns}}.where({{0}} {self.pick(COMPARE)} {{1}}, {{2}}, {{3}})", kids, shape)

    def gen_clip(self, shape, depth):
        lo = self.pick([-1.0, -0.5, 0.0])
        hi = self.pick([0.5, 1.0, 2.0])
        return Node(f"{{ns}}.clip({{0}}, {lo}, {hi})", [self.expr(shape, depth)], shape)

    def gen_reduce(self, shape, depth):
        kind = self.pick(REDUCE)
        ones = [k for k, d in enumerate(shape) if d == 1]
        cap = 4 if kind == "prod" else MAX_DIM
        if ones and self.p(0.5):
            axes = sorted(set(self.pick(ones) for _ in range(2)))
            inner = tuple(int(self.rng.integers(1, cap + 1)) if k in axes else d for k, d in enumerate(shape))
            keep = True
        else:
            if len(shape) >= MAX_NDIM:
                return None
            n_new = int(self.rng.integers(1, MAX_NDIM - len(shape) + 1))
            inner = list(shape)
            axes = []
            for _ in range(n_new):
                at = int(self.rng.integers(0, len(inner) + 1))
                inner.insert(at, int(self.rng.integers(1, cap + 1)))
                axes = [a + (a >= at) for a in axes] + [at]
            inner, axes, keep = tuple(inner), sorted(axes), False
        nd = len(inner)
        if len(axes) == nd and not keep and self.p(0.5):
            axis_txt = None
        elif len(axes) == 1:
            a = axes[0]
            axis_txt = str(a - nd if self.p(0.3) else a)
        else:
            axis_txt = str(tuple(axes))
        args = ([] if axis_txt is None else [f"axis={axis_txt}"]) + (["keepdims=True"] if keep else [])
        child = self.expr(inner, depth)
        if self.p(0.3):
            return Node(f"{{0}}.{kind}({', '.join(args)})", [child], shape)
        return Node(f"{{ns}}.{kind}({', '.join(['{0}'] + args)})", [child], shape)

    def gen_matmul(self, shape, depth):
        k = self.extent()
        if len(shape) == 0:
            a, b = (k,), (k,)
        elif len(shape) == 1:
            a, b = ((shape[0], k), (k,)) if self.p(0.5) else ((k,), (k, shape[0]))
        elif len(shape) == 2:
            a, b = (shape[0], k), (k, shape[1])
        else:
            a = shape[:2] + (k,)
            b = (shape[0], k, shape[2]) if self.p(0.7) else (k, shape[2])
        form = self.pick(["({0} @ {1})", "{ns}.matmul({0}, {1})"] + (["{ns}.dot({0}, {1})"] if len(a) <= 2
                                                                     and len(b) <= 2 else []))
        return Node(form, [self.expr(a, depth), self.expr(b, depth)], shape)

    def gen_view(self, shape, depth):
        kind = self.pick(["transpose", "reshape", "slice", "slice", "newaxis", "swapaxes", "moveaxis",
                          "expand_dims", "squeeze", "broadcast_to", "ravel"])
        if kind in ("swapaxes", "moveaxis") and len(shape) >= 2:
            a, b = (int(v) for v in self.rng.choice(len(shape), 2, replace=False))
            perm = list(range(len(shape)))
            if kind == "swapaxes":
                perm[a], perm[b] = perm[b], perm[a]
            else:   # moveaxis(x, a, b): axis a of x ends at b
                rest = [k for k in range(len(shape)) if k != a]
                rest.insert(b, a)
                perm = rest
            inner = [0] * len(shape)
            for k, pk in enumerate(perm):
                inner[pk] = shape[k]
            return Node(f"{{ns}}.{kind}({{0}}, {a}, {b})", [self.expr(tuple(inner), depth)], shape, view=True)
        if kind == "expand_dims" and 1 in shape:
            at = shape.index(1)
            return Node(f"{{ns}}.expand_dims({{0}}, {at})", [self.expr(shape[:at] + shape[at + 1:], depth)], shape,
                        view=True)
        if kind == "squeeze" and len(shape) < MAX_NDIM:
            at = int(self.rng.integers(0, len(shape) + 1))
            return Node(f"{{ns}}.squeeze({{0}}, axis={at})", [self.expr(shape[:at] + (1,) + shape[at:], depth)],
                        shape, view=True)
        if kind == "broadcast_to" and shape:
            inner = self.sub_broadcast(shape)
            return Node(f"{{ns}}.broadcast_to({{0}}, {shape})", [self.expr(inner, depth)], shape, view=True)
        if kind == "ravel" and len(shape) == 1:
            options = [s for s in _divisor_shapes(shape[0]) if len(s) > 1]
            if options:
                return Node(self.pick(["{0}.ravel()", "{ns}.ravel({0})"]), [self.expr(self.pick(options), depth)],
                            shape, view=True)
        if kind == "transpose" and len(shape) >= 2:
            perm = [int(v) for v in self.rng.permutation(len(shape))]
            inner = [0] * len(shape)
            for k, pk in enumerate(perm):
                inner[pk] = shape[k]
            if perm == list(reversed(range(len(shape)))) and self.p(0.5):
                return Node("{0}.T", [self.expr(tuple(inner), depth)], shape, view=True)
            return Node(f"{{ns}}.transpose({{0}}, {tuple(perm)})", [self.expr(tuple(inner), depth)], shape, view=True)
        if kind == "reshape" and shape:
            options = [s for s in _divisor_shapes(int(np.prod(shape))) if s != shape]
            if not options:
                return None
            inner = self.pick(options)
            txt = list(shape)
            if self.p(0.3):
                txt[int(self.rng.integers(len(txt)))] = -1
            target = str(tuple(txt)) if len(txt) > 1 else str(txt[0])
            if self.p(0.5):
                return Node(f"{{0}}.reshape({target})", [self.expr(inner, depth)], shape, view=True)
            return Node(f"{{ns}}.reshape({{0}}, {target})", [self.expr(inner, depth)], shape, view=True)
        if kind == "newaxis" and 1 in shape:
            at = shape.index(1)
            inner = shape[:at] + shape[at + 1:]
            key = ", ".join(["None" if k == at else ":" for k in range(len(shape))])
            return Node(f"{{0}}[{key}]", [self.expr(inner, depth)], shape, view=True)
        if kind == "slice" and shape:
            keys, inner = [], []
            for d in shape:
                if self.p(0.15) and len(inner) + (len(shape) - len(keys)) < MAX_NDIM:
                    big = int(self.rng.integers(1, MAX_DIM + 1))
                    i = int(self.rng.integers(0, big))
                    keys.append(str(i - big if self.p(0.3) else i))
                    inner.append(big)
                big = int(self.rng.integers(d, max(d, min(MAX_DIM + 3, 3 * d + 2)) + 1))
                key = self.fit_slice(big, d)
                if key is None:
                    key, big = ":", d
                keys.append(key)
                inner.append(big)
            if len(inner) > MAX_NDIM:
                return None
            return Node(f"{{0}}[{', '.join(keys)}]", [self.expr(tuple(inner), depth)], shape, view=True)
        return None

    def gen_concat(self, shape, depth):
        if not shape:
            return None
        axis = int(self.rng.integers(len(shape)))
        if shape[axis] == 2 and self.p(0.5):
            inner = shape[:axis] + shape[axis + 1:]
            return Node(f"{{ns}}.stack([{{0}}, {{1}}], axis={axis})", [self.expr(inner, depth),
                                                                      self.expr(inner, depth)], shape)
        if shape[axis] < 2:
            return None
        cut = int(self.rng.integers(1, shape[axis]))
        a = shape[:axis] + (cut,) + shape[axis + 1:]
        b = shape[:axis] + (shape[axis] - cut,) + shape[axis + 1:]
        return Node(f"{{ns}}.concatenate([{{0}}, {{1}}], axis={axis})", [self.expr(a, depth), self.expr(b, depth)],
                    shape)

    def gen_gather(self, shape, depth):
        axis = int(self.rng.integers(len(shape)))
        m = self.extent()
        idx = self.new_index(shape[axis], m)
        inner = shape[:axis] + (m,) + shape[axis + 1:]
        if axis == 0 and self.p(0.5):
            tpl = f"{{0}}[{idx}]"
        elif self.p(0.4):
            tpl = f"{{0}}[{', '.join([':'] * axis + [idx])}]"
        else:
            tpl = f"{{ns}}.take({{0}}, {idx}, axis={axis})"
        return Node(tpl, [self.expr(inner, depth)], shape, refs=(idx,))

    # -- issue 31: contractions, index reshuffles, diagonals, selections, scans
    def gen_einsum(self, shape, depth):
        """A two-operand einsum (summed letters, shared batch letters, sometimes a
        diagonal read) or tensordot whose result has ``shape``."""
        if shape and self.p(0.3):
            cut = int(self.rng.integers(0, len(shape) + 1))
            summed = tuple(self.extent() for _ in range(self.pick([1, 1, 2])))
            a, b = shape[:cut] + summed, summed + shape[cut:]
            if max(len(a), len(b)) > MAX_NDIM:
                return None
            return Node(f"{{ns}}.tensordot({{0}}, {{1}}, {len(summed)})", [self.expr(a, depth), self.expr(b, depth)],
                        shape)
        out = "abc"[:len(shape)]
        summed = "xy"[:self.pick([1, 1, 2])]
        size = dict(zip(out, shape)) | {c: self.extent() for c in summed}
        la, lb = list(summed), list(summed)
        for c in out:
            side = self.pick(["a", "b", "both"])
            (la if side != "b" else lb).append(c)
            if side == "both":
                lb.append(c)
        la, lb = ([str(c) for c in self.rng.permutation(x)] for x in (la, lb))
        if self.p(0.2):   # a diagonal: one summed letter twice in an operand
            la.insert(int(self.rng.integers(0, len(la) + 1)), summed[0])
        if len(la) > MAX_NDIM or len(lb) > MAX_NDIM:
            return None
        spec = f"{''.join(la)},{''.join(lb)}->{out}"
        kids = [self.expr(tuple(size[c] for c in la), depth), self.expr(tuple(size[c] for c in lb), depth)]
        return Node(f"{{ns}}.einsum('{spec}', {{0}}, {{1}})", kids, shape)

    def gen_reshuffle(self, shape, depth):
        """roll, flip, pad (every mode), tile or repeat with result ``shape``."""
        if not shape:
            return None
        nd = len(shape)
        ax = int(self.rng.integers(nd))
        kind = self.pick(["roll", "flip", "pad", "tile", "repeat"])
        if kind == "roll":
            shift = int(self.rng.integers(-7, 8))
            where = "" if self.p(0.3) else f", axis={ax - nd if self.p(0.3) else ax}"
            return Node(f"{{ns}}.roll({{0}}, {shift}{where})", [self.expr(shape, depth)], shape)
        if kind == "flip":
            where = "" if self.p(0.2) else f", axis={ax}"
            return Node(f"{{ns}}.flip({{0}}{where})", [self.expr(shape, depth)], shape)
        if kind == "pad":
            mode = self.pick(["constant", "edge", "reflect", "symmetric", "wrap"])
            least = 1 if mode in ("constant", "edge") else 2
            room = shape[ax] - least
            if room < 1:
                return None
            total = int(self.rng.integers(1, room + 1))
            if mode in ("reflect", "symmetric", "wrap"):
                total = min(total, shape[ax] - total)   # pads no wider than the array they mirror
                if total < 1:
                    return None
            before = int(self.rng.integers(0, total + 1))
            inner = shape[:ax] + (shape[ax] - total,) + shape[ax + 1:]
            widths = tuple((before, total - before) if k == ax else (0, 0) for k in range(nd))
            return Node(f"{{ns}}.pad({{0}}, {widths}, mode='{mode}')", [self.expr(inner, depth)], shape)
        reps = [r for r in (2, 3) if shape[ax] % r == 0]
        if not reps:
            return None
        r = self.pick(reps)
        inner = shape[:ax] + (shape[ax] // r,) + shape[ax + 1:]
        if kind == "tile":
            counts = tuple(r if k == ax else 1 for k in range(nd))
            return Node(f"{{ns}}.tile({{0}}, {counts})", [self.expr(inner, depth)], shape)
        return Node(f"{{ns}}.repeat({{0}}, {r}, axis={ax})", [self.expr(inner, depth)], shape)

    def gen_diagonal(self, shape, depth):
        """triu/tril, trace, diag (both ways) or diagonal with result ``shape``."""
        if len(shape) >= 2 and self.p(0.4):
            k = int(self.rng.integers(-1, 2))
            return Node(f"{{ns}}.{self.pick(['triu', 'tril'])}({{0}}, {k})", [self.expr(shape, depth)], shape)
        if len(shape) == 2 and shape[0] == shape[1] and self.p(0.5):
            return Node("{ns}.diag({0})", [self.expr(shape[:1], depth)], shape)
        if len(shape) < MAX_NDIM - 1 or (not shape and self.p(0.5)):
            n = self.extent()
            if not shape:
                return Node("{ns}.trace({0})", [self.expr((n, self.extent()), depth)], shape)
            if len(shape) == 1 and self.p(0.5):
                k = int(self.rng.integers(-1, 2))
                inner = (shape[0] + max(-k, 0), shape[0] + max(k, 0))
                return Node(f"{{ns}}.diag({{0}}, {k})", [self.expr(inner, depth)], shape)
            inner = (shape[0], n) + shape[1:] if self.p(0.5) else shape + (n,)
            a1, a2 = (0, len(inner) - 1) if inner[0] == shape[0] and inner[1] == n else (len(inner) - 1, 0)
            if inner[a1] != inner[a2]:
                inner = tuple(shape[0] if k in (a1, a2) else d for k, d in enumerate(inner))
                rest = tuple(d for k, d in enumerate(inner) if k not in (a1, a2)) + (shape[0],)
                if rest != shape:
                    return None
            fn = self.pick([f"{{ns}}.diagonal({{0}}, 0, {a1}, {a2})", f"{{ns}}.trace({{0}}, 0, {a1}, {a2})"])
            out = tuple(d for k, d in enumerate(inner) if k not in (a1, a2))
            if fn.startswith("{ns}.diagonal"):
                out = out + (inner[a1],)
            return Node(fn, [self.expr(inner, depth)], shape) if out == shape else None
        return None

    def gen_select(self, shape, depth):
        """sort, a gather through argsort, take_along_axis with an index
        argument, or a quantile / median reduction to ``shape``."""
        r = self.rng.random()
        if shape and r < 0.25:
            ax = int(self.rng.integers(len(shape)))
            return Node(f"{{ns}}.sort({{0}}, axis={ax - len(shape) if self.p(0.3) else ax})",
                        [self.expr(shape, depth)], shape)
        if shape and r < 0.45:
            ax = int(self.rng.integers(len(shape)))
            return Node(f"{{ns}}.take_along_axis({{0}}, {{ns}}.argsort({{1}}, axis={ax}), axis={ax})",
                        [self.expr(shape, depth), self.expr(shape, depth)], shape)
        if len(shape) == 1 and r < 0.55:
            m = self.extent()
            idx = self.new_index(shape[0], m)
            return Node(f"{{ns}}.take_along_axis({{0}}, {idx}, axis=0)", [self.expr((m,), depth)], shape,
                        refs=(idx,))
        if len(shape) >= MAX_NDIM:
            return None
        at = int(self.rng.integers(0, len(shape) + 1))
        inner = shape[:at] + (self.extent(),) + shape[at:]
        q = self.pick([0.0, 0.25, 0.5, 0.7, 1.0])
        fn = self.pick([f"{{ns}}.median({{0}}, axis={at})", f"{{ns}}.quantile({{0}}, {q}, axis={at})",
                        f"{{ns}}.percentile({{0}}, {100 * q}, axis={at})"])
        return Node(fn, [self.expr(inner, depth)], shape)

    def gen_scan(self, shape, depth):
        """cumsum, cumprod or diff along an axis of ``shape``."""
        if not shape:
            return None
        ax = int(self.rng.integers(len(shape)))
        kind = self.pick(["cumsum", "cumsum", "cumprod", "diff"])
        if kind == "diff":
            inner = shape[:ax] + (shape[ax] + 1,) + shape[ax + 1:]
            return Node(f"{{ns}}.diff({{0}}, axis={ax})", [self.expr(inner, depth)], shape)
        return Node(f"{{ns}}.{kind}({{0}}, axis={ax})", [self.expr(shape, depth)], shape)

    # -- statements
    def owned(self) -> list[str]:
        return [n for n in list(self.locals) + list(self.floats) if n not in self.frozen]

    def region(self, shape: tuple) -> tuple[str, tuple] | None:
        """A random basic-slice key of an array of ``shape`` and the region's shape."""
        if not shape:
            return None
        keys, region = [], []
        for d in shape:
            r = self.rng.random()
            if r < 0.15:
                i = int(self.rng.integers(0, d))
                keys.append(str(i - d if self.p(0.3) else i))
                continue
            n = int(self.rng.integers(1, d + 1)) if r < 0.7 else d
            key = self.fit_slice(d, n) if r < 0.7 else ":"
            keys.append(key or ":")
            region.append(n if key else d)
        while len(keys) > 1 and keys[-1] == ":" and self.p(0.5):
            keys.pop()
        return ", ".join(keys), tuple(region)

    def stmt_assign(self, depth):
        shape = self.rand_shape()
        e = self.expr(shape, depth)
        var = self.new_local(shape)
        if e.view and self.p(0.5):   # a real view: it and what it views are never updated afterwards
            self.frozen |= e.names() | {var}
            return Assign(var, e)
        return Assign(var, e, copy=e.view)

    def stmt_update(self, depth, var=None):
        var = var or self.pick(self.owned())
        shape = self.arrays()[var]
        key, region = (None, shape)
        if shape and self.p(0.7):
            key, region = self.region(shape)
        op = self.pick(["+", "+", "-", "*", "="] if key is not None else ["+", "-", "*"])
        rhs_shape = self.sub_broadcast(region) if self.p(0.3) else region
        return Update(var, key, op, self.expr(rhs_shape, depth))

    def stmt_loop(self, depth):
        var = self.pick(self.owned())
        body = [self.stmt_map_into(depth, var) if self.arrays()[var] and self.p(0.35) else
                self.stmt_update(depth, var) for _ in range(int(self.rng.integers(1, 3)))]
        return Loop(int(self.rng.integers(2, 4)), body)

    def stmt_map_into(self, depth, var):
        """An sd.map plain write into part of an existing array (a stencil step when it reads ``var``)."""
        shape = self.arrays()[var]
        axes = [int(v) for v in self.rng.permutation(len(shape))]
        ranges, tdims = [None] * len(shape), []
        for t, k in enumerate(axes):
            n = int(self.rng.integers(1, shape[t] + 1))
            lo = int(self.rng.integers(0, 3))
            start = int(self.rng.integers(0, shape[t] - n + 1))
            ranges[k] = (lo, lo + n)
            tdims.append((k, start - lo))
        return MapStmt(var, None, ranges, tdims, False, self.map_expr(ranges, depth))

    def map_read(self, ranges) -> Node:
        nd = len(ranges)
        if self.indices and self.p(0.1) or self.p(0.08):
            k = int(self.rng.integers(nd))
            lo, hi = ranges[k]
            c = int(self.rng.integers(-lo, 3))
            m = int(self.rng.integers(1, MAX_DIM + 1))
            idx = self.new_index(hi + c + int(self.rng.integers(0, 2)), m)
            a = self.pick([n for n, s in self.arrays().items() if len(s) == 1] or [self.new_float((m,)).name])
            self.indices[idx] = (self.indices[idx][0], self.arrays()[a][0])
            return MGather(a, idx, k, c)
        rank = int(self.rng.integers(1, nd + 1))
        axes = [int(v) for v in self.rng.permutation(nd)[:rank]]
        if rank < MAX_NDIM and self.p(0.1):
            axes.insert(int(self.rng.integers(0, rank + 1)), None)
        candidates = [n for n, s in self.arrays().items() if len(s) == len(axes)
                      and all(k is None or s[t] >= ranges[k][1] - ranges[k][0] for t, k in enumerate(axes))]
        if candidates and self.p(0.6):
            name = self.pick(candidates)
            shape = self.arrays()[name]
        else:
            shape = tuple((int(self.rng.integers(1, 4)) if k is None else
                           ranges[k][1] + int(self.rng.integers(0, 3))) for k in axes)
            name = self.new_float(shape).name
        dims = []
        for t, k in enumerate(axes):
            if k is None:
                dims.append((None, int(self.rng.integers(0, shape[t]))))
                continue
            lo, hi = ranges[k]
            start = int(self.rng.integers(0, shape[t] - (hi - lo) + 1))   # first element read
            dims.append((k, start - lo))
        return MRead(name, dims)

    def map_expr(self, ranges, depth) -> Node:
        if depth <= 0 or self.p(0.25):
            return const(self.pick([0.5, 2.0, -1.0])) if self.p(0.1) else self.map_read(ranges)
        r = self.rng.random()
        if r < 0.35:
            return Node(self.pick(UNARY), [self.map_expr(ranges, depth - 1)], ())
        if r < 0.85:
            return Node(self.pick(BINARY), [self.map_expr(ranges, depth - 1), self.map_expr(ranges, depth - 1)], ())
        kids = [self.map_expr(ranges, depth - 1) for _ in range(4)]
        return Node(f"{{ns}}.where({{0}} {self.pick(COMPARE)} {{1}}, {{2}}, {{3}})", kids, ())

    def stmt_map(self, depth):
        nd = self.pick([1, 1, 2, 2, 3])
        ranges = []
        for _ in range(nd):
            lo = int(self.rng.integers(0, 3))
            ranges.append((lo, lo + self.extent()))
        acc = self.p(0.45)
        if acc:
            named = [k for k in range(nd) if self.p(0.5)]
        else:
            named = list(range(nd))
        named = [int(v) for v in self.rng.permutation(named)]
        tdims, shape = [], []
        for k in named:
            lo, hi = ranges[k]
            start = int(self.rng.integers(0, 3))
            tdims.append((k, start - lo))
            shape.append(start + hi - lo + int(self.rng.integers(0, 3)))
        if not tdims:
            tdims, shape = [(None, 0)], [1]
        shape = tuple(shape)
        body = self.map_expr(ranges, depth)
        existing = [n for n in self.owned() if n in self.locals and self.locals[n] == shape]
        if existing and self.p(0.3):
            return MapStmt(self.pick(existing), None, ranges, tdims, acc, body)
        return MapStmt(self.new_local(shape), shape, ranges, tdims, acc, body)

    def stmt_scatter(self, depth):
        candidates = [n for n in self.owned() if n in self.locals and len(self.locals[n]) >= 1]
        if candidates and self.p(0.3):
            var, create = self.pick(candidates), None
            shape = self.locals[var]
        else:
            shape = self.rand_shape(self.pick([1, 1, 2]))
            var, create = self.new_local(shape), shape
        length = int(self.rng.integers(1, MAX_DIM + 3))
        idx = self.new_index(length, shape[0])
        region = (length,) + shape[1:]
        rhs = self.sub_broadcast(region) if self.p(0.3) else region
        return Scatter(var, create, idx, self.expr(rhs, depth))

    def program(self) -> Program:
        stmts = []
        for _ in range(int(self.rng.integers(1, 7))):
            depth = int(self.rng.integers(1, 4))
            kind = self.pick(["assign"] * 5 + ["update"] * 3 + ["loop", "map", "map", "scatter"])
            if kind in ("update", "loop") and not self.owned():
                kind = "assign"
            stmts.append(getattr(self, "stmt_" + kind)(depth))
        last = stmts[-1]
        outs = [last.var if not isinstance(last, Loop) else last.body[0].var]
        # every local that nothing after it reads is an output too (no dead code)
        for t, s in enumerate(stmts):
            if isinstance(s, (Assign, MapStmt, Scatter)):
                later = set().union(*(stmt_names(x) for x in stmts[t + 1:]))
                if s.var not in later:
                    outs.append(s.var)
        if not self.floats or self.p(0.5):
            outs.append(self.pick(list(self.floats)) if self.floats else self.new_float(self.rand_shape()).name)
        ret = [(n, "mean" if self.p(0.2) else "sum") for n in dict.fromkeys(outs)]
        second = None
        edge = self.p(0.25)
        if not edge and self.p(0.15):
            second = self.pick(list(self.floats))
        return Program(self.seed, dict(self.floats), dict(self.indices), stmts, ret, edge, second,
                       dict(self.locals))


def generate(seed: int) -> Program:
    """The program of one seed (deterministic)."""
    return Generator(seed).program()
