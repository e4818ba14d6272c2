"""The op table both sides of store versus recompute ask (ir.op_cost): which
expressions call a function, which are plain arithmetic, checked on forms whose
kind is known by hand."""
import sympy

from symdiff.ir import op_cost
from symdiff.ir.op_cost import Op

x, y = sympy.symbols("x y", real=True)


def test_kinds_of_nodes():
    assert op_cost.kind(x) is Op.LEAF and op_cost.kind(sympy.Float(2.5)) is Op.LEAF
    assert op_cost.kind(x + y) is Op.ARITHMETIC and op_cost.kind(x ** 3) is Op.ARITHMETIC
    assert op_cost.kind(sympy.sqrt(x)) is Op.CALL and op_cost.kind(x ** y) is Op.CALL
    assert op_cost.kind(sympy.tanh(x)) is Op.CALL and op_cost.kind(sympy.Max(x, y)) is Op.CALL
    assert op_cost.kind(x > y) is Op.LOGIC


def test_calls_and_arithmetic():
    assert not op_cost.calls(3 * x - x ** 3 / 7) and op_cost.arithmetic(3 * x - x ** 3 / 7)
    assert op_cost.calls(1 - sympy.tanh(x) ** 2) and not op_cost.arithmetic(1 - sympy.tanh(x) ** 2)
    assert op_cost.calls(x * y ** sympy.Rational(1, 2))  # a root is a call
    choice = sympy.Piecewise((x, x > 0), (0, True))
    assert op_cost.calls(choice) and not op_cost.arithmetic(choice)
    # a comparison is neither a call nor arithmetic: not free to recompute on a CPU
    assert not op_cost.calls(x > y) and not op_cost.arithmetic(x > y)
    assert op_cost.operations(x * y + 1) == 2
