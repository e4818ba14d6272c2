"""Contractions (issue 31) against jax.numpy float64: value and VJP on the
numpy device; and each reaches the ``@`` tasklet that lowering tiles."""
import numpy as np
import pytest

import symdiff as sd
from symdiff.ir.specs import f64
from symdiff.lowering.matmul import matmul_shape
from numpy_oracle import arrays, check, program, refused

A, B, C, D = arrays((3, 4), (4, 5), (5, 2), (2, 3, 4))
V3, V4, V5 = arrays((3,), (4,), (5,))
T = arrays((2, 3, 4, 5))[0]
S = arrays((4, 4))[0]

CASES = {
    "einsum_matmul": (lambda xp, a, b: xp.einsum("ij,jk->ik", a, b), A, B),
    "einsum_implicit": (lambda xp, a, b: xp.einsum("ij,jk", a, b), A, B),
    "einsum_implicit_order": (lambda xp, a, b: xp.einsum("kj,ji", b.T, a.T), A, B),
    "einsum_transpose_output": (lambda xp, a, b: xp.einsum("ij,jk->ki", a, b), A, B),
    "einsum_three_operands": (lambda xp, a, b, c: xp.einsum("ij,jk,kl->il", a, b, c), A, B, C),
    "einsum_four_operands": (lambda xp, a, b, c, v: xp.einsum("ij,jk,kl,i->l", a, b, c, v), A, B, C, V3),
    "einsum_batch": (lambda xp, d, b: xp.einsum("bij,jk->bik", d, b), D, B),
    "einsum_attention": (lambda xp, q, k: xp.einsum("bqd,bkd->bqk", q, k), D, D * 0.5),
    "einsum_two_summed": (lambda xp, t, d: xp.einsum("abcd,abc->d", t, d), T, D),
    "einsum_two_summed_matrix": (lambda xp, t, e: xp.einsum("abcd,ebc->de", t, e), T, arrays((3, 3, 4))[0]),
    "einsum_ellipsis": (lambda xp, d, b: xp.einsum("...j,jk->...k", d, b), D, B),
    "einsum_ellipsis_broadcast": (lambda xp, d, a: xp.einsum("...ij,...jk->...ik", d, a.T), D, A),
    "einsum_ellipsis_implicit": (lambda xp, d: xp.einsum("i...->...", d), D),
    "einsum_trace": (lambda xp, s: xp.einsum("ii", s), S),
    "einsum_diagonal": (lambda xp, s: xp.einsum("ii->i", s), S),
    "einsum_diagonal_product": (lambda xp, s, a: xp.einsum("ii,ji->j", s, a), S, A),
    "einsum_sum_all": (lambda xp, a: xp.einsum("ij->", a), A),
    "einsum_private_sum": (lambda xp, a, b: xp.einsum("ij,kl->ik", a, b), A, B),
    "einsum_outer": (lambda xp, u, v: xp.einsum("i,j->ij", u, v), V3, V4),
    "einsum_hadamard": (lambda xp, a, b: xp.einsum("ij,ij->ij", a, b), A, A * 2),
    "einsum_dot": (lambda xp, u, v: xp.einsum("i,i", u, v), V4, V4[::-1]),
    "einsum_size_1_summed_axes": (lambda xp, a, b: xp.einsum("ngckx,gock->ngox", a, b),
                                  *arrays((2, 1, 3, 1, 4), (1, 5, 3, 1))),   # packing c and k (size 1)
    "einsum_interleaved": (lambda xp, a, b: xp.einsum(a, [0, 1], b, [1, 2], [0, 2]), A, B),
    "tensordot_2": (lambda xp, t, e: xp.tensordot(t, e, 2), T, arrays((4, 5, 3))[0]),
    "tensordot_1": (lambda xp, a, b: xp.tensordot(a, b, 1), A, B),
    "tensordot_0": (lambda xp, u, v: xp.tensordot(u, v, 0), V3, V4),
    "tensordot_axes_lists": (lambda xp, t, d: xp.tensordot(t, d, axes=([1, 0], [1, 0])), T, D),
    "tensordot_negative_axes": (lambda xp, t, b: xp.tensordot(t, b, axes=(-1, 1)), T, B),
    "inner_vectors": (lambda xp, u, v: xp.inner(u, v), V4, V4 + 1),
    "inner_nd": (lambda xp, d, a: xp.inner(d, a), D, A),
    "inner_scalar": (lambda xp, u, v: xp.inner(u[0], v), V4, V4),
    "vdot": (lambda xp, a, b: xp.vdot(a, b), A, A[::-1]),
    "dot_nd": (lambda xp, d, t: xp.dot(d, t[0]), D, T),
    "kron": (lambda xp, a, b: xp.kron(a, b), A, C),
    "kron_ranks": (lambda xp, u, d: xp.kron(u, d), V3, D),
    "cross_3": (lambda xp, a, b: xp.cross(a, b), D[:, :, :3], D[:, :, 1:]),
    "cross_2_and_3": (lambda xp, a, b: xp.cross(a, b), D[:, :, :2], D[:, :, 1:]),
    "cross_2": (lambda xp, a, b: xp.cross(a, b), A[:, :2], A[:, 2:]),
    "cross_axes": (lambda xp, a, b: xp.cross(a, b, axisa=0, axisb=-1, axisc=0), A[:3, :2], D[0, :2, :3]),
    "multi_dot": (lambda xp, a, b, c: xp.linalg.multi_dot([a, b, c]), A, B, C),
    "multi_dot_vectors": (lambda xp, u, a, b, v: xp.linalg.multi_dot([u, a, b, v]), V3, A, B, V5),
    "matmul_broadcast_batch": (lambda xp, d, e: xp.matmul(d[:, None], e), D, arrays((3, 4, 2))[0]),
    "matmul_vector_batch": (lambda xp, u, d: u @ d.transpose(0, 2, 1), V4, D),
}


@pytest.mark.parametrize("name", list(CASES))
def test_contraction_matches_jax(name):
    body, *inputs = CASES[name]
    check(body, *inputs, rtol=1e-9, atol=1e-11)


def _tiled(body, *inputs) -> int:
    """How many of the forward graph's tasklets lowering reads as a matmul."""
    graph = sd.ir.trace(program(body, len(inputs)).function, *(f64[x.shape] for x in inputs))
    return sum(matmul_shape(graph, t) is not None for t in graph.tasklets())


@pytest.mark.parametrize("name", ["einsum_matmul", "einsum_attention", "einsum_two_summed_matrix", "tensordot_axes_lists",
                                  "einsum_three_operands"])
def test_contractions_reach_the_matmul_tasklet(name):
    body, *inputs = CASES[name]
    assert _tiled(body, *inputs) >= 1


def test_einsum_refusals():
    refused(lambda xp, a, b: xp.einsum("ij,jk->iq", a, b), A, B, match="output subscripts")
    refused(lambda xp, a, b: xp.tensordot(a, b, ([0], [0])), A, B, match="shape-mismatch")
    refused(lambda xp, a, b: xp.einsum("ij,jk->ik", a, a), A, B, match="sizes 4 and 3")
    refused(lambda xp, a, b: xp.einsum("ij,jk,k->i", a, b), A, B, match="2 operands")
    refused(lambda xp, a, b: xp.einsum("ij,ij->ij", a, b), A, B, match="sizes 3 and 4|sizes 4 and 5")
