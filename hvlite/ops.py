"""Reduction ops under Horovod's names and with Horovod's values (Average 0, Sum 1, Adasum 2,
Min 3, Max 4, Product 5): the core's table (_core/codes.h) is in Horovod's order.

Adasum (adaptive summation, Maleki et al. 2021) combines gradients by their dot products
instead of adding them: allreduce and grouped_allreduce only, float dtypes only."""
import enum

from hvlite._core.codes import OPS

ReduceOp = enum.IntEnum("ReduceOp", [(name, code) for code, name in enumerate(OPS)],
                        module=__name__)


Sum = ReduceOp.Sum
Average = ReduceOp.Average
Min = ReduceOp.Min
Max = ReduceOp.Max
Product = ReduceOp.Product
Adasum = ReduceOp.Adasum


def as_op(op):
    if type(op) is ReduceOp:
        return op
    from hvlite.errors import InvalidArgumentError
    try:
        return ReduceOp(op)
    except ValueError:
        pass
    if isinstance(op, str):
        for member in ReduceOp:
            if member.name.lower() == op.lower():
                return member
    raise InvalidArgumentError(
        f"unknown reduction op {op!r}; use one of hvlite.Sum, Average, Min, Max, Product, Adasum")
