"""Model-shaped random programs: blocks as real models write them, composed.

``gen.py``'s programs are small random op trees; bugs that need the shape of a
model (issue 29: a Gaussian mixture's broadcast over three axes, two
max-subtractions over different axes, reductions feeding each other) are out of
its reach.  This generator composes *blocks* instead: dense layers,
normalisations (layer, batch, RMS, over any axis), softmax and logsumexp with
max-subtraction over any axis, attention-like contractions (``@`` or einsum), pairwise
broadcasts over 3-4 axes, nested reductions, masked and piecewise terms,
unrolled residual loops of such blocks, and unrolled RNNs over a sequence,
ending in a scalar loss.

Programs are ordinary ``gen.Program`` objects (one ``Assign`` per named
intermediate, ``Loop`` for loops), so ``check``, ``runner`` and ``minimize``
treat them as they treat ``gen.py``'s.  Values stay finite by construction, as
real models keep them: ``exp`` only of max-subtracted, bounded or parameter
values, ``log`` only of sums of such exponentials or of ``|x| + c``, divisions
only by ``sqrt(var + eps)``, sums of exponentials or ``|x| + c``.

Sizes include axes such as 33, 65 and 257 that no workgroup size divides, with
every intermediate kept small (``MAX_ELEMENTS``) so compiling stays quick.
"""
from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from typing import Callable, ClassVar

import numpy as np

from .gen import Arg, Assign, Loop, Node, Program, stmt_names
from .minimize import cleanup

OPS_RANGE = (20, 80)          # numpy-level operations per program (loops counted unrolled)
MAX_ELEMENTS = 12_000         # largest intermediate: compile and run time stay small
ROWS = (33, 40, 65, 17, 129, 257)     # batch / sequence axes: partial workgroups
FEATURES = (3, 4, 5, 8, 12, 16)
COMPONENTS = (4, 7, 9, 33)
EDGE_P = 0.1                  # inputs drawn from gen.EDGE_VALUES (ties in max, zeros in abs)
SECOND_P = 0.04               # checked to second order (compile time doubles: rare)
RECURRENT_P = 0.3             # an unrolled RNN over a sequence before the loss


@dataclass
class ModelProgram(Program):
    """A ``gen.Program`` that says which generator made it (for replay lines)."""
    generator: ClassVar[str] = "models"


# ---------------------------------------------------------------- counting operations

def _count(node: ast.AST) -> int:
    """numpy-level operations in one statement: arithmetic, comparisons and
    calls; views (subscripts, ``.T``) and signs of literals are free."""
    if isinstance(node, ast.For):
        times = node.iter.args[0].value if isinstance(node.iter, ast.Call) else 1
        return times * sum(_count(s) for s in node.body)
    n = 0
    for sub in ast.walk(node):
        if isinstance(sub, (ast.BinOp, ast.Compare, ast.BoolOp)):
            n += 1
        elif isinstance(sub, ast.UnaryOp) and not isinstance(sub.operand, ast.Constant):
            n += 1
        elif isinstance(sub, ast.Call) and not (isinstance(sub.func, ast.Name) and sub.func.id == "range"):
            n += 1
    return n


def op_count(prog: Program) -> int:
    """Operations the program runs (the loss's returned sum included)."""
    tree = ast.parse("\n".join(prog.body_lines("np")).replace("return ", "_ret = "))
    return sum(_count(s) for s in tree.body)


def stmt_ops(stmt) -> int:
    return sum(_count(s) for s in ast.parse("\n".join(stmt.lines("np"))).body)


# ---------------------------------------------------------------- expression helpers

def _view_shape(shape: tuple, key: tuple) -> tuple:
    """The shape of ``a[key]`` for an array of ``shape`` (no data made)."""
    return np.broadcast_to(np.empty(()), shape)[key].shape


def _key_text(key: tuple) -> str:
    def one(k):
        if k is None:
            return "None"
        if isinstance(k, slice):
            return ":" if k == slice(None) else f"{k.start or ''}:{k.stop or ''}"
        return str(k)
    return ", ".join(one(k) for k in key)


def ew(tpl: str, *kids: Node) -> Node:
    """An elementwise expression over broadcast operands."""
    return Node(tpl, list(kids), tuple(np.broadcast_shapes(*(k.shape for k in kids))))


def sub(x: Node, key: tuple) -> Node:
    """``x[key]`` (basic indexing: slices, None, integers)."""
    return Node(f"{{0}}[{_key_text(key)}]", [x], _view_shape(x.shape, key), view=True)


def reduce(kind: str, x: Node, axis, keepdims: bool = False, neg: bool = False, method: bool = False) -> Node:
    """``np.<kind>(x, axis=..., keepdims=...)``; ``neg`` prints the axis from the end."""
    nd = len(x.shape)
    axes = tuple(range(nd)) if axis is None else ((axis,) if isinstance(axis, int) else tuple(axis))
    axes = tuple(a % nd for a in axes)
    shape = tuple((1 if k in axes else d) for k, d in enumerate(x.shape) if keepdims or k not in axes)
    args = []
    if axis is not None:
        shown = tuple(a - nd for a in axes) if neg else axes
        args.append(f"axis={shown[0] if len(shown) == 1 else shown}")
    if keepdims:
        args.append("keepdims=True")
    if method:
        return Node(f"{{0}}.{kind}({', '.join(args)})", [x], shape)
    return Node(f"{{ns}}.{kind}({', '.join(['{0}'] + args)})", [x], shape)


def matmul(a: Node, b: Node, form: str = "({0} @ {1})") -> Node:
    if len(b.shape) == 1:
        shape = a.shape[:-1]
    else:
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        shape = tuple(batch) + a.shape[-2:-1] + b.shape[-1:]
    return Node(form, [a, b], shape)


# ---------------------------------------------------------------- the generator


class ModelGenerator:
    """Builds one model-shaped program; ``rng`` decides everything."""

    def __init__(self, seed: int, attempt: int = 0):
        self.seed = seed
        self.rng = np.random.default_rng([seed, 0x6D6F64, attempt])     # a stream of its own, not gen.py's
        self.floats: dict[str, tuple] = {}
        self.locals: dict[str, tuple] = {}
        self.out: list = []           # where statements go (the program, or a loop's body)
        self.n_locals = 0
        self.ops = 0
        self.rows = self.pick(ROWS)
        self.feat = self.pick(FEATURES)
        self.comp = self.pick(COMPONENTS)
        self.batch = self.pick((2, 3))

    # -- randomness
    def p(self, prob: float) -> bool:
        return bool(self.rng.random() < prob)

    def pick(self, seq):
        return seq[int(self.rng.integers(len(seq)))]

    def features(self) -> int:
        return self.feat if self.p(0.6) else self.pick(FEATURES)

    # -- names
    def param(self, shape: tuple, role: str = "w") -> Arg:
        """A new float argument (weights, data, targets: all differentiated)."""
        name = f"{role}{len(self.floats)}"
        self.floats[name] = tuple(shape)
        return Arg(name, tuple(shape))

    def let(self, expr: Node, name: str | None = None) -> Arg:
        """Bind ``expr`` to a new local (or rebind ``name``) as one statement."""
        if name is None:
            name = f"v{self.n_locals}"
            self.n_locals += 1
        self.locals[name] = tuple(expr.shape)
        stmt = Assign(name, expr)
        self.out.append(stmt)
        self.ops += stmt_ops(stmt)
        return Arg(name, tuple(expr.shape))

    def fits(self, *shapes: tuple) -> bool:
        return all(int(np.prod(s)) <= MAX_ELEMENTS for s in shapes)

    def axis(self, x: Node) -> tuple[int, bool]:
        """A random axis of ``x`` and whether to print it from the end."""
        return int(self.rng.integers(len(x.shape))), self.p(0.4)

    # -- building blocks (each returns the new stream value)
    def activation(self, h: Node) -> Node:
        """Smooth and piecewise activations in the forms models write them
        (sigmoid through tanh: ``1 / (1 + exp(-x))`` overflows in float32)."""
        return self.pick([
            lambda: ew("{ns}.tanh({0})", h),
            lambda: ew("{ns}.maximum({0}, 0.0)", h),
            lambda: ew("{ns}.where({0} > 0, {0}, 0.1 * {0})", h),
            lambda: ew("(0.5 * {0} * (1.0 + {ns}.tanh(0.7978845608 * ({0} + 0.044715 * {0} ** 3))))", h),
            lambda: ew("({ns}.maximum({0}, 0.0) + {ns}.log1p({ns}.exp(-{ns}.abs({0}))))", h),
            lambda: ew("({0} * (0.5 * {ns}.tanh(0.5 * {0}) + 0.5))", h),
            lambda: ew("{ns}.clip({0}, -2.0, 2.0)", h),
        ])()

    def dense(self, x: Arg, width: int | None = None) -> Arg:
        """``act(x @ W / sqrt(fan_in) + b)``."""
        width = width or self.features()
        if not self.fits(x.shape[:-1] + (width,)):
            return x
        w = self.param((x.shape[-1], width), "w")
        forms = ["({0} @ {1})", "{ns}.matmul({0}, {1})"] + (["{ns}.dot({0}, {1})"] if len(x.shape) == 2 else [])
        form = self.pick(forms)
        h = ew(f"({{0}} * {1 / math.sqrt(x.shape[-1]):.6g})", matmul(x, w, form))
        if self.p(0.7):
            h = ew("({0} + {1})", h, self.param((width,), "b"))
        return self.let(self.activation(h) if self.p(0.8) else h)

    def norm(self, x: Arg) -> Arg:
        """Layer norm (last axis), RMS norm, batch norm (leading axes) or a norm over any axis."""
        kind = self.pick(["layer", "layer", "rms", "batch", "any"])
        nd = len(x.shape)
        if kind in ("layer", "rms"):
            axis = nd - 1
        elif kind == "batch":
            axis = tuple(range(nd - 1)) if nd > 2 and self.p(0.5) else 0
        else:
            axis = int(self.rng.integers(nd))
        axes = (axis,) if isinstance(axis, int) else axis
        if int(np.prod([x.shape[a] for a in axes])) < 2:
            return x
        eps = self.pick([1e-5, 1e-3, 0.1])
        neg = self.p(0.4)
        if kind == "rms":
            ms = self.let(reduce("mean", ew(self.pick(["({0} * {0})", "{ns}.square({0})", "({0} ** 2)"]), x),
                                 axis, True, neg))
            y = ew(f"({{0}} / {{ns}}.sqrt({{1}} + {eps}))", x, ms)
        else:
            if self.p(0.25):    # np.var's own reduction, next to the mean
                mu = self.let(reduce("mean", x, axis, True, neg))
                var = self.let(reduce("var", x, axis, True, neg))
                xc = ew("({0} - {1})", x, mu)
            else:
                mu = self.let(reduce("mean", x, axis, True, neg, method=self.p(0.2)))
                xc = self.let(ew("({0} - {1})", x, mu))
                var = self.let(reduce("mean", ew(self.pick(["({0} * {0})", "({0} ** 2)"]), xc), axis, True, neg))
            y = ew(self.pick([f"({{0}} / {{ns}}.sqrt({{1}} + {eps}))", f"({{0}} * ({{1}} + {eps}) ** -0.5)"]), xc, var)
        if self.p(0.7):
            y = ew("({0} * {1})", y, self.param((x.shape[-1],), "g"))
            if kind != "rms" and self.p(0.7):
                y = ew("({0} + {1})", y, self.param((x.shape[-1],), "b"))
        return self.let(y)

    def max_of(self, x: Node, axis: int, neg: bool) -> Node:
        """``max(x, axis)`` kept as an axis of length 1, in one of the forms people write."""
        form = self.pick(["keepdims", "keepdims", "none", "expand"])
        if form == "keepdims":
            return self.let(reduce("max", x, axis, True, neg))
        m = self.let(reduce("max", x, axis, False, neg))
        if form == "expand":
            return Node(f"{{ns}}.expand_dims({{0}}, {axis - len(x.shape) if neg else axis})", [m], 
                        tuple(1 if k == axis else d for k, d in enumerate(x.shape)), view=True)
        return sub(m, tuple(None if k == axis else slice(None) for k in range(len(x.shape))))

    def drop_axis(self, m: Node, axis: int) -> Node:
        """``m`` (length 1 on ``axis``) without that axis: ``m[:, 0]`` or ``np.squeeze``."""
        if isinstance(m, Arg) and self.p(0.6):
            return sub(m, tuple(0 if k == axis else slice(None) for k in range(len(m.shape))))
        return Node(f"{{ns}}.squeeze({{0}}, axis={axis})", [m], tuple(d for k, d in enumerate(m.shape) if k != axis),
                    view=True)

    def softmax(self, x: Arg, axis: int | None = None, neg: bool = False) -> Arg:
        """``exp(x - max) / sum(exp(x - max))`` over an axis."""
        if axis is None:
            axis, neg = self.axis(x)
        m = self.max_of(x, axis, neg)
        e = self.let(ew("{ns}.exp({0} - {1})", x, m))
        return self.let(ew("({0} / {1})", e, reduce("sum", e, axis, True, neg)))

    def logsumexp(self, x: Arg, axis: int | None = None, keep: bool | None = None) -> Arg:
        """``m + log(sum(exp(x - m)))`` over an axis (that axis dropped, or kept: a log-softmax)."""
        if axis is None:
            axis, neg = self.axis(x)
        else:
            neg = self.p(0.4)
        m = self.max_of(x, axis, neg)
        if isinstance(m, Node) and not isinstance(m, Arg):
            m = self.let(m)
        keep = self.p(0.3) if keep is None else keep
        s = reduce("sum", ew("{ns}.exp({0} - {1})", x, m), axis, keep, neg)
        lse = ew("({0} + {ns}.log({1}))", m if keep else self.drop_axis(m, axis), s)
        if keep and self.p(0.6):    # log-softmax
            return self.let(ew("({0} - {1})", x, lse))
        return self.let(lse)

    def attention(self, x: Arg) -> Arg:
        """``softmax(q k^T / sqrt(d)) v`` with projections, optionally causal or
        against another sequence (cross-attention)."""
        if len(x.shape) < 2:
            return x
        d = self.pick([4, 8, self.feat])
        n = x.shape[-2]
        cross = self.p(0.3)
        m = self.pick([7, 17, 33]) if cross else n
        if not self.fits(x.shape[:-2] + (n, m), x.shape[:-1] + (d,)):
            return x
        src = self.param(x.shape[:-2] + (m, x.shape[-1]), "x") if cross else x
        wq, wk, wv = (self.param((x.shape[-1], d), "w") for _ in range(3))
        s = 1 / math.sqrt(x.shape[-1])
        q = self.let(ew(f"({{0}} * {s:.6g})", matmul(x, wq)))
        k = self.let(ew(f"({{0}} * {s:.6g})", matmul(src, wk)))
        v = self.let(matmul(src, wv))
        if self.p(0.3):     # issue 31: the einsum spelling of q k^T
            scores = Node("{ns}.einsum('...qd,...kd->...qk', {0}, {1})", [q, k], q.shape[:-1] + k.shape[-2:-1])
        elif len(k.shape) == 2 and self.p(0.5):
            scores = matmul(q, Node("{0}.T", [k], (k.shape[1], k.shape[0]), view=True))
        else:
            kt = Node("{ns}.swapaxes({0}, -1, -2)", [k], k.shape[:-2] + (k.shape[-1], k.shape[-2]), view=True)
            scores = matmul(q, kt, self.pick(["({0} @ {1})", "{ns}.matmul({0}, {1})"]))
        scores = ew(f"({{0}} * {1 / math.sqrt(d):.6g})", scores)
        if not cross and self.p(0.4):
            mask = Node(f"({{ns}}.arange({n})[:, None] >= {{ns}}.arange({n})[None, :])", [], (n, n))
            scores = ew("{ns}.where({0}, {1}, -10000.0)", mask, scores)
        elif self.p(0.3):
            scores = ew("{ns}.where({0} > -0.5, {1}, -30.0)", self.param(scores.shape[-2:], "k"), scores)
        p = self.softmax(self.let(scores), len(scores.shape) - 1, self.p(0.5))
        o = matmul(p, v, self.pick(["({0} @ {1})", "{ns}.einsum('...qk,...kd->...qd', {0}, {1})"]))
        if d != x.shape[-1] or self.p(0.6):    # back to the stream's width
            o = matmul(o, self.param((d, x.shape[-1]), "w"))
        return self.let(o)

    def pairwise(self, x: Arg) -> Arg:
        """Scores of every row against every centre: ``x[:, None, :] - mu[None, :, :]``
        (4 axes for a batched ``x``), scaled by ``exp(logsig)``, reduced over the features."""
        k = self.comp if self.p(0.7) else self.pick(COMPONENTS)
        f = x.shape[-1]
        lead = x.shape[:-1]
        if not self.fits(lead + (k, f)):
            return x
        mu = self.param((k, f), "mu")
        xe = sub(x, (slice(None),) * len(lead) + (None, slice(None)))
        me = sub(mu, (None,) * len(lead) + (slice(None), slice(None))) if self.p(0.7) else mu
        diff = ew("({0} - {1})", xe, me)
        scaled = self.p(0.7)
        if scaled:
            ls = self.param((k, f), "ls")
            scale = ew("{ns}.exp({0})", ls)
            if self.p(0.6):
                scale = sub(scale, (None,) * len(lead) + (slice(None), slice(None)))
            diff = ew("({0} / {1})", diff, scale)
        d = self.let(diff)
        kind = self.pick(["sq", "sq", "sq", "l1", "dist"])
        if kind == "sq":
            square = ew(self.pick(["({0} ** 2)", "({0} * {0})"]), d)
            red = reduce("sum", square, -1 if self.p(0.6) else len(d.shape) - 1)
            score = ew("(-0.5 * {0})", red)
        elif kind == "l1":
            score = ew("(-{0})", reduce("sum", ew("{ns}.abs({0})", d), len(d.shape) - 1))
        else:
            score = ew("(-{ns}.sqrt({0} + 1e-3))", reduce("sum", ew("({0} * {0})", d), len(d.shape) - 1))
        if scaled and self.p(0.7):
            score = ew("({0} - {1})", score, reduce("sum", ls, -1))
        if self.p(0.5):
            score = ew(f"({{0}} - {0.5 * f * math.log(2 * math.pi):.6g})", score)
        return self.let(score)

    def log_weights(self, x: Arg) -> Arg:
        """Add normalised log mixture weights over the last axis:
        ``logw = l - max(l); logw = logw - log(sum(exp(logw)))``."""
        lg = self.param((x.shape[-1],), "lg")
        w = self.let(ew("({0} - {1})", lg, reduce("max", lg, None)))
        w = self.let(ew("({0} - {ns}.log({1}))", w, reduce("sum", ew("{ns}.exp({0})", w), None)), w.name)
        return self.let(ew("({0} + {1})", x, w))

    def nested(self, x: Arg) -> Arg:
        """Reductions over different axes feeding each other and broadcast back."""
        if len(x.shape) < 2:
            return x
        a, b = (int(v) for v in self.rng.choice(len(x.shape), 2, replace=False))
        k1, k2 = self.pick(["sum", "mean", "max", "min"]), self.pick(["sum", "mean", "max"])
        r1 = self.let(reduce(k1, x, a, True, self.p(0.3)))
        inner = self.pick(["({0} - {1})", "({0} * {1})", "{ns}.tanh({0} - {1})"])
        r2 = self.let(reduce(k2, ew(inner, x, r1), b, True, self.p(0.3)))
        if self.p(0.3):     # and one more, over everything
            r2 = self.let(ew("({0} / ({ns}.abs({1}) + 1.0))", r2, reduce("max", ew("{ns}.abs({0})", r2), None)))
        out = self.pick(["(({0} - {1}) / ({ns}.abs({2}) + 1.0))", "({0} * {ns}.tanh({2}) - {1})",
                         "({0} + 0.1 * {2} * {1})"])
        return self.let(ew(out, x, r1, r2))

    def piecewise(self, x: Arg) -> Arg:
        """Masked and piecewise terms: leaky ReLU, clips, Huber, masks from data."""
        other = self.param(x.shape if self.p(0.5) else x.shape[-1:], "z")
        y = self.pick([
            lambda: ew("{ns}.where({0} > 0, {0}, 0.2 * {0})", x),
            lambda: ew("{ns}.clip({0}, -1.5, 1.5)", x),
            lambda: ew("{ns}.where({ns}.abs({0}) < 1.0, 0.5 * {0} * {0}, {ns}.abs({0}) - 0.5)", x),
            lambda: ew("{ns}.where({1} > {0}, {ns}.tanh({1}), {0})", x, other),
            lambda: ew("{ns}.maximum({0}, {1})", x, other),
            lambda: ew("{ns}.minimum({ns}.maximum({0}, -1.0), {1})", x, other),
            lambda: ew("({0} * ({1} > 0.0))", x, other),
            lambda: ew("{ns}.log({ns}.abs({0}) + 1.0)", x),
            lambda: ew("{ns}.where(({0} > 0) & ({1} < 0.5), {0}, -{1})", x, other),
        ])()
        return self.let(y)

    def combine(self, x: Arg) -> Arg:
        """A residual or gated sum with an earlier value of the same shape."""
        same = [n for n, s in self.locals.items() if s == x.shape and n != x.name]
        if not same:
            return x
        y = Arg(self.pick(same), x.shape)
        return self.let(ew(self.pick(["({0} + {1})", "({0} + 0.5 * {1})", "({0} * {ns}.tanh({1}))"]), x, y))

    def residual_loop(self, x: Arg) -> Arg:
        """``for _t in range(n): h = h + 0.5 * block(h)`` (shape-preserving blocks, shared weights)."""
        h = self.let(ew("(1.0 * {0})", x))
        body, outer = [], self.out
        self.out = body
        y = h
        for _ in range(int(self.rng.integers(1, 3))):
            kind = self.pick(["norm", "dense", "piecewise", "nested", "attention", "softmax"])
            if kind == "dense":
                y = self.dense(y, h.shape[-1])
            else:
                y = getattr(self, kind)(y)
        self.let(ew(self.pick(["({0} + 0.5 * {1})", "(0.5 * {0} + 0.5 * {1})"]), h, y), h.name)
        self.out = outer
        times = int(self.rng.integers(2, 4))
        body_ops = sum(stmt_ops(s) for s in body)
        self.ops += (times - 1) * body_ops
        self.out.append(Loop(times, body))
        return h

    def recurrent(self, x: Arg) -> Arg:
        """An Elman RNN over a sequence the model also reads, from the stream as its state:
        ``for _t in range(T): h = act(seq[_t] @ wx * c + h @ wh * c (+ b))`` (weights shared by
        the steps; the input products differ only in the slice: ``ir.batch_products``)."""
        if len(x.shape) != 2:
            return x
        steps, width, fan_in = int(self.rng.integers(2, 5)), x.shape[-1], self.features()
        if not self.fits((steps,) + x.shape[:1] + (fan_in,)):
            return x
        seq = self.param((steps,) + x.shape[:1] + (fan_in,), "x")
        wx, wh = self.param((fan_in, width), "w"), self.param((width, width), "w")
        h = self.let(ew("(1.0 * {0})", x))
        body, outer = [], self.out
        self.out = body
        step = Node("{0}[_t]", [seq], seq.shape[1:], view=True)
        pre = ew("({0} + {1})", ew(f"({{0}} * {1 / math.sqrt(fan_in):.6g})", matmul(step, wx)),
                 ew(f"({{0}} * {1 / math.sqrt(width):.6g})", matmul(h, wh)))
        if self.p(0.6):
            pre = ew("({0} + {1})", pre, self.param((width,), "b"))
        self.let(self.activation(pre), h.name)
        self.out = outer
        self.ops += (steps - 1) * sum(stmt_ops(s) for s in body)
        self.out.append(Loop(steps, body))
        return h

    # -- the whole program
    def stream(self) -> Arg:
        """The data the model reads: rows of features, sometimes batched."""
        shape = (self.rows, self.feat)
        if self.p(0.3) and self.fits((self.batch,) + shape):
            shape = (self.batch,) + shape
        return self.param(shape, "x")

    def loss(self, x: Arg) -> Arg:
        """A scalar: a mixture's negative log-likelihood, cross-entropy, MSE, Huber, a quantile of the
        squared residuals or a weighted mean."""
        kind = self.pick(["nll", "nll", "xent", "mse", "huber", "dot", "quantile"])
        if kind == "nll":
            axis = len(x.shape) - 1 if self.p(0.6) else int(self.rng.integers(len(x.shape)))
            lse = self.logsumexp(x, axis, keep=False)
            return self.let(ew("(-{0})", reduce("mean", lse, None)))
        if kind == "xent":
            t = self.softmax(self.param(x.shape, "t"), len(x.shape) - 1)
            ls = self.logsumexp(x, len(x.shape) - 1, keep=True)
            if ls.shape != x.shape:
                ls = self.let(ew("({0} - {1})", x, ls))
            return self.let(ew("(-{0})", reduce("mean", reduce("sum", ew("({0} * {1})", t, ls), -1), None)))
        t = self.param(x.shape, "t")
        if kind == "mse":
            return self.let(reduce("mean", ew("(({0} - {1}) ** 2)", x, t), None))
        if kind == "quantile":   # a robust loss: the median (or another quantile) of the residuals per row
            q = self.pick(["{ns}.median({0}, axis=-1)", "{ns}.quantile({0}, 0.8, axis=-1)",
                           "{ns}.percentile({0}, 25.0, axis=-1)"])
            r = self.let(ew("(({0} - {1}) ** 2)", x, t))
            return self.let(reduce("mean", Node(q, [r], r.shape[:-1]), None))
        if kind == "huber":
            r = self.let(ew("({0} - {1})", x, t))
            return self.let(reduce("mean", ew("{ns}.where({ns}.abs({0}) < 1.0, 0.5 * {0} * {0}, {ns}.abs({0}) - 0.5)",
                                              r), None))
        return self.let(reduce("mean", ew("({0} * {1})", x, t), None))

    BLOCKS: ClassVar[list[tuple[str, int]]] = [
        ("dense", 4), ("norm", 4), ("softmax", 2), ("logsumexp", 1), ("attention", 2), ("pairwise", 2),
        ("nested", 3), ("piecewise", 3), ("combine", 2), ("residual_loop", 2), ("mixture", 2),
    ]

    def mixture(self, x: Arg) -> Arg:
        """Issue 29's Gaussian mixture: pairwise scores plus normalised log weights."""
        y = self.pairwise(x)
        return self.log_weights(y) if y is not x else y

    def block(self, x: Arg) -> Arg:
        """One block chosen by ``BLOCKS``' weights (the stream unchanged where it does not apply)."""
        names = [n for n, _ in self.BLOCKS]
        weights = np.array([w for _, w in self.BLOCKS], float)
        kind = names[int(self.rng.choice(len(names), p=weights / weights.sum()))]
        if kind == "logsumexp" and len(x.shape) < 2:   # keep an axis for the loss to reduce
            return x
        return getattr(self, kind)(x)

    def program(self) -> ModelProgram:
        """Blocks on a data stream until about ``target`` operations, then a loss
        (``target`` leaves room for the loss and the loop's repeats)."""
        target = int(self.rng.integers(OPS_RANGE[0] + 2, OPS_RANGE[1] - 18))
        self.out = []
        x = self.stream()
        if self.p(0.3):
            x = self.mixture(x)
        for _ in range(40):
            if self.ops >= target:
                break
            x = self.block(x)
        # a stream of its own: the blocks above stay what they were before this one was added
        if np.random.default_rng([self.seed, 0x726E6E]).random() < RECURRENT_P and self.ops < OPS_RANGE[1] - 25:
            x = self.recurrent(x)
        loss = self.loss(x)
        stmts = self.out
        outs = [loss.name] + self.dead_locals(stmts, loss.name)
        ret = [(n, "sum" if n == loss.name else "mean") for n in outs]
        edge = self.p(EDGE_P)
        used = {n for n, _ in ret}.union(*(stmt_names(s) for s in stmts))
        second = self.pick([n for n in self.floats if n in used]) if not edge and self.p(SECOND_P) else None
        prog = ModelProgram(self.seed, dict(self.floats), {}, stmts, ret, edge, second, dict(self.locals))
        return cleanup(prog)    # parameters of unchosen alternatives

    @staticmethod
    def dead_locals(stmts: list, loss: str) -> list[str]:
        """Locals nothing after their definition reads: returned too (no dead code)."""
        out = []
        for t, s in enumerate(stmts):
            if isinstance(s, Assign) and s.var != loss:
                later = set().union(*(stmt_names(x) for x in stmts[t + 1:]))
                if s.var not in later:
                    out.append(s.var)
        return out


def generate(seed: int, attempts: int = 8) -> ModelProgram:
    """The program of one seed (deterministic); one inside ``OPS_RANGE`` if any
    of a few tries of the seed gives one."""
    prog = None
    for k in range(attempts):
        prog = ModelGenerator(seed, k).program()
        if OPS_RANGE[0] <= op_count(prog) <= OPS_RANGE[1]:
            return prog
    return prog


def node_shapes(prog: Program) -> list[tuple]:
    """The shape of every expression node and every named array of ``prog``
    (inline temporaries included: a broadcast difference need not be named)."""
    out = list(prog.floats.values()) + list(prog.locals_.values())

    def walk(node: Node) -> None:
        out.append(tuple(node.shape))
        for k in node.kids:
            walk(k)

    def stmts(seq: list) -> None:
        for s in seq:
            if isinstance(s, Loop):
                stmts(s.body)
            else:
                for k in s.kids():
                    walk(k)

    stmts(prog.stmts)
    return out
