"""THE op table: one ``OpRow`` per op.

A row says everything graphfuser knows about an op: its aten name(s), kind, argument positions
(TorchScript schema order), which arguments must be constants, the type-promotion rule, the
eager reference, the C expression (a primitive from ``codegen.kir.PRIMS``, whose template both
renderers share) or a decomposition into primitives, and extra fusibility checks. The partition
pass asks ``fusible(node)`` and gets back ``None`` (ok) or a reason; lowering calls
``row.lower``; the frontend's ``fd.ops.<name>`` and the ops listing read the same rows.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch

from ..ir.kir import FLOAT_TYPES, INT_TYPES, Expr, ExprBuilder, compute_dtype
from ..ir.types import TensorType
from .promotion import Participant, result_type

KINDS = ("pointwise", "cast", "reduction", "normalization", "movement")
PROMOTIONS = ("default", "int_to_float", "always_bool", "cast", "none")


@dataclass
class OpCall:
    """One use of a row while lowering: the node's arguments by name."""

    args: dict[str, Any]            # tensor/runtime-scalar args as Expr, constants as Python values
    participants: dict[str, Participant]
    out_dtype: torch.dtype          # the output's dtype, from profiling
    compute: torch.dtype            # dtype the row computes in (after promotion)
    b: ExprBuilder
    device_type: str = ""           # the node's device ("cpu", "cuda"; "" when not known)
    # profiled types of the tensor arguments, by name: eager's kernels choose their arithmetic by
    # layout in places (batch norm's CPU fast path needs contiguous operands), and a group's
    # guard pins the layout it was lowered for
    types: dict[str, TensorType] = field(default_factory=dict)

    def __getitem__(self, name: str) -> Any:
        return self.args[name]

    def x(self, name: str) -> Expr:
        """Argument ``name`` as an expression in the compute dtype (constants become literals)."""
        v = self.args[name]
        if isinstance(v, Expr):
            return self.b.cast(v, self.compute)
        return self.b.const(v, self.compute)

    def const(self, value: Any, dtype: Optional[torch.dtype] = None) -> Expr:
        return self.b.const(value, dtype or self.compute)


@dataclass
class OpRow:
    name: str
    aten: tuple[str, ...]
    kind: str
    args: tuple[str, ...]                       # schema order; "alpha=1" gives a default
    promotion: str = "default"
    promote: tuple[str, ...] = ("self",)        # args taking part in type promotion
    consts: tuple[str, ...] = ()                # args that must be compile-time constants
    ignored: tuple[str, ...] = ()               # args that only select an overload (to's extras)
    prim: Optional[str] = None                  # primitive whose C template implements the row
    decomp: Optional[Callable[[OpCall], Expr]] = None
    eager: Optional[Callable] = None            # reference, called with schema-order args
    check: Optional[Callable[[dict[str, Any], dict[str, Participant]], Optional[str]]] = None
    doc: str = ""
    float_only: bool = False                    # rejects integer/bool compute (e.g. erf on ints)
    no_bool: bool = False
    promotion_for: Optional[Callable[[dict[str, Any]], str]] = None  # promotion that depends on consts
    n_outputs: int = 1                          # native_dropout: (output, mask)
    dense_output: bool = False                  # fuses only where its profiled output is dense and
                                                # contiguous (dense_copy: unfused it is a view)

    def __post_init__(self) -> None:
        assert self.kind in KINDS and self.promotion in PROMOTIONS, self.name
        assert self.prim or self.decomp, f"{self.name}: needs a primitive or a decomposition"

    # -- arguments ------------------------------------------------------------------------
    @property
    def arg_names(self) -> tuple[str, ...]:
        return tuple(a.split("=")[0] for a in self.args)

    def defaults(self) -> dict[str, Any]:
        out = {}
        for a in self.args:
            if "=" in a:
                name, v = a.split("=", 1)
                out[name] = eval(v, {"None": None, "inf": float("inf")})  # literals only
        return out

    @property
    def c_template(self) -> str:
        from ..ir.kir import PRIMS

        if self.prim:
            return PRIMS[self.prim][1].format(*self.arg_names)
        return f"decomposition: {self.decomp.__doc__ or self.decomp.__name__}".strip()

    # -- typing ---------------------------------------------------------------------------
    def result_dtypes(self, parts: dict[str, Participant], consts: dict[str, Any]) -> tuple[torch.dtype, torch.dtype]:
        """(output dtype, compute dtype) for these participants, matching torch exactly."""
        common = result_type([parts[a] for a in self.promote if a in parts])
        promotion = self.promotion_for(consts) if self.promotion_for else self.promotion
        if promotion == "default":
            return common, compute_dtype(common)
        if promotion == "int_to_float":
            out = torch.get_default_dtype() if common in INT_TYPES + (torch.bool,) else common
            return out, compute_dtype(out)
        if promotion == "always_bool":
            return torch.bool, compute_dtype(common)
        if promotion == "none":
            return common, compute_dtype(common)
        raise AssertionError("cast rows compute their dtype from the profiled output")

    @property
    def derivative(self) -> Optional[Callable]:
        """The derivative formula of this row (``ops/derivatives.py``), or None."""
        from .derivatives import DERIVATIVES

        return DERIVATIVES.get(self.name)

    def lower(self, call: OpCall) -> Expr:
        if self.decomp is not None:
            return self.decomp(call)
        names = [a for a in self.arg_names if a not in self.consts and a not in self.ignored]
        return call.b.call(self.prim, *[call.x(n) for n in names], dtype=call.compute)

    def reject(self, consts: dict[str, Any], parts: dict[str, Participant], compute: torch.dtype) -> Optional[str]:
        if self.float_only and compute not in FLOAT_TYPES:
            return f"{self.name} computes in {compute}; graphfuser fuses it for floating types only"
        if self.no_bool and compute == torch.bool:
            return f"{self.name} on bool is not fused"
        if self.check is not None:
            return self.check(consts, parts)
        return None


REGISTRY: dict[str, OpRow] = {}      # aten kind -> row
ROWS: dict[str, OpRow] = {}          # row name -> row


def register(row: OpRow) -> OpRow:
    assert row.name not in ROWS, f"duplicate row {row.name}"
    ROWS[row.name] = row
    for kind in row.aten:
        assert kind not in REGISTRY, f"{kind} claimed twice"
        REGISTRY[kind] = row
    return row


def lookup(kind: str) -> Optional[OpRow]:
    return REGISTRY.get(kind)
