"""Differentiable fusion groups (TorchScript's ``prim::DifferentiableGraph``).

A fusion group whose tensor inputs were profiled with ``requires_grad=1`` runs, under grad
mode, as one autograd node (``function.py``): its forward is the group's fused kernel and its
backward is a graph built from the op table's derivative column (``backward.py``), which is
itself scripted and runs through the same profile -> partition -> guard -> lower -> render ->
compile pipeline as any other graph. The forward saves the group's inputs, and a training batch
norm's statistics (``saved.py``); everything else the backward recomputes.
"""
from .backward import BackwardPlan, plan_backward
from .function import STATS, GraphRunners, make_differentiable_runner

__all__ = ["BackwardPlan", "plan_backward", "make_differentiable_runner", "GraphRunners", "STATS"]
