"""Reduction ops under Horovod's names. Values match the core's op codes."""
import enum


class ReduceOp(enum.IntEnum):
    Sum = 0
    Average = 1
    Min = 2
    Max = 3
    Product = 4


Sum = ReduceOp.Sum
Average = ReduceOp.Average
Min = ReduceOp.Min
Max = ReduceOp.Max
Product = ReduceOp.Product


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
        f"unknown reduction op {op!r}; use one of hvlite.Sum, Average, Min, Max, Product")
