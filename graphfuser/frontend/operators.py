"""``fd.ops``: one method per op-table row, generated from ``graphfuser.ops.ROWS``.

Each method has the row's name, its arguments in aten schema order with their defaults (an
``inspect.Signature``, so ``help(FusionDefinition.Operators)`` shows them) and the row's doc as
its first line; calls go to ``FusionDefinition._op``. Rows registered later (reductions, say)
are picked up by ``sync_operators``, which every new definition and unknown-name lookup runs.

    >>> from graphfuser.frontend import FusionDefinition
    >>> FusionDefinition.Operators.add.__doc__.splitlines()[0]
    'self + alpha * other'
"""
from __future__ import annotations

from inspect import Parameter, Signature
from typing import TYPE_CHECKING, Any, Union

from ..ops import ROWS
from ..ops.table import OpRow
from ..ops.datatype import DataType
from .opcall import DefinitionError

if TYPE_CHECKING:  # pragma: no cover
    from .fusion_definition import FusionDefinition, Scalar, Tensor

# nvFuser's keyword for a row's argument name (fd.ops accepts both)
_ALIAS_TO_ROW = {"axes": "dim"}


class Operators:
    """The operators of a FusionDefinition, one per op-table row: ``fd.ops.add(t0, t1)``.

    Arguments follow the row (aten schema order and defaults); constants may be Python values,
    ``define_constant`` scalars or ``DataType``\\ s (for dtype arguments). ``cast(t, dtype)``
    converts the element type (nvFuser's name for ``to``).
    """

    def __init__(self, fd: "FusionDefinition") -> None:
        self._fd = fd

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        sync_operators()
        if name in type(self).__dict__:
            return getattr(self, name)
        raise AttributeError(f"fd.ops has no operator {name!r}; see help(FusionDefinition.Operators) or "
                             "`python -m graphfuser ops`")

    def cast(self, input: Union["Tensor", "Scalar"], dtype: DataType) -> "Tensor":
        """convert the element type: cast(t, dtype=DataType.Half) (aten::to)"""
        return self._fd._op(ROWS["to"], {"self": input, "arg1": DataType.of(dtype)}, name="cast")


def _make_op(row: OpRow):
    defaults = row.defaults()
    params = [Parameter("ops", Parameter.POSITIONAL_ONLY)]
    params += [Parameter(n, Parameter.POSITIONAL_OR_KEYWORD, default=defaults.get(n, Parameter.empty))
               for n in row.arg_names]
    sig = Signature(params)

    def op(*args: Any, **kwargs: Any) -> Any:
        for alias, real in _ALIAS_TO_ROW.items():
            if alias in kwargs and real in row.arg_names:
                kwargs[real] = kwargs.pop(alias)
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError as e:
            raise DefinitionError(f"fd.ops.{row.name}: {e}") from None
        bound.apply_defaults()
        ops = bound.arguments.pop("ops")
        return ops._fd._op(row, dict(bound.arguments))

    op.__name__ = row.name
    op.__qualname__ = f"Operators.{row.name}"
    op.__signature__ = sig
    op.__doc__ = f"{row.doc or row.name}\n\n{row.kind} op ({', '.join(row.aten)})"
    return op


def sync_operators() -> None:
    """Give ``Operators`` a method for every op-table row registered so far (rows added later,
    e.g. reductions, appear on the next definition or lookup)."""
    for name, row in list(ROWS.items()):
        if name not in Operators.__dict__:
            setattr(Operators, name, _make_op(row))


sync_operators()
