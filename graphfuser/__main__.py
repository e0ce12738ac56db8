"""Command line: ``python -m graphfuser <command>``.

Commands::

    python -m graphfuser ops            # the op table: what fd.ops.<name> and the fuser support
    python -m graphfuser ops --kind pointwise
    python -m graphfuser fuzz --device cpu --graphs 2000 --seed 7 --out logs/   # see tools/fuzz.py
    python -m graphfuser demo           # and every other tool: python -m graphfuser <tool> --help
    python -m graphfuser bench --device cuda
    python -m graphfuser zoo --device cuda   # real models: eager / jit / torch.compile / graphfuser
    python -m graphfuser prof infer --device cuda --models swin_t

A command is a function taking the parsed arguments (``COMMANDS``); a tool is a module of
``graphfuser/tools/`` with its own parser and a ``main(argv) -> int`` (``PASSTHROUGH``), also run
as ``tools/<tool>.py``.
"""
from __future__ import annotations

import argparse
import sys
from typing import Callable, Optional


def ops_command(args: argparse.Namespace) -> int:
    """Print the op table (the rows behind ``fd.ops`` and ``help(FusionDefinition.Operators)``)."""
    from rich.console import Console
    from rich.table import Table

    from .frontend.fusion_definition import sync_operators
    from .ops import ROWS, op_listing

    sync_operators()
    table = Table(title=f"graphfuser op table ({len(ROWS)} rows)", show_lines=False)
    for col in ("fd.ops", "signature", "aten", "kind", "promotion", "doc"):
        table.add_column(col, overflow="fold")
    for name, aten, kind, promotion, doc in op_listing():
        if args.kind and kind != args.kind:
            continue
        table.add_row(name, f"({', '.join(ROWS[name].args)})", aten, kind, promotion, doc)
    Console(soft_wrap=False, width=args.width).print(table)
    return 0


def fuzz_command(args: argparse.Namespace) -> int:
    """Fuzz graphfuser against eager PyTorch with random graphs (needs hypothesis)."""
    from .fuzz.cli import run_args

    return run_args(args)


COMMANDS: dict[str, tuple[Callable[[argparse.Namespace], int], str]] = {
    "ops": (ops_command, "list the op table (fd.ops operators)"),
    "fuzz": (fuzz_command, "random graphs through graphfuser and eager; writes logs/fuzz-<device>.md"),
}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m graphfuser", description="graphfuser command line",
                                epilog="python -m graphfuser <command> --help: the command's flags")
    sub = p.add_subparsers(dest="command", metavar="command")
    for name, (_, text) in PASSTHROUGH.items():
        sub.add_parser(name, help=text)
    ops = sub.add_parser("ops", help=COMMANDS["ops"][1])
    ops.add_argument("--kind", help="only rows of this kind (pointwise, cast, reduction ...)")
    ops.add_argument("--width", type=int, default=None, help="table width (default: the terminal's)")
    from .fuzz.cli import add_arguments

    add_arguments(sub.add_parser("fuzz", help=COMMANDS["fuzz"][1]))
    return p


# The tools (graphfuser/tools/<module>.py, each also tools/<module>.py), with their own argument
# parsers: ``python -m graphfuser <name> --help``. name -> (module, one line of help).
PASSTHROUGH: dict[str, tuple[str, str]] = {
    "demo": ("demo", "script an MLP block, show the optimized graph, check it against eager"),
    "bench": ("bench", "eager / torch.jit.script / torch.compile / graphfuser side by side; logs/bench-*"),
    "bench_reductions": ("bench_reductions", "the reduction and normalization bench cases alone"),
    "bench_train": ("bench_train", "forward + backward benchmark (bench --train); logs/bench-train-*"),
    "sweep_pointwise": ("sweep_pointwise", "sweep the CUDA pointwise schedule knobs on the bench cases"),
    "sweep_reductions": ("sweep_reductions", "sweep the CUDA reduction schedule knobs on the bench cases"),
    "zoo": ("zoo", "real models through eager / jit / torch.compile / graphfuser (--train: SGD steps)"),
    "prof": ("prof", "where the time goes: prof infer | train | zoo-train"),
    "hf_zoo": ("hf_zoo", "Hugging Face models from configs through torch.compile: eager / Inductor / graphfuser"),
    "race": ("race", "whole models: eager / Inductor (both modes) / graphfuser, cold and steady; logs/race-*"),
    "cuda_smoke": ("cuda_smoke", "NVRTC -> CUBIN -> driver launch smoke test and host timings"),
}


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    tool = argv[0].replace("-", "_") if argv else None
    if tool in PASSTHROUGH:
        import importlib

        return importlib.import_module(f"graphfuser.tools.{PASSTHROUGH[tool][0]}").main(argv[1:])
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    return COMMANDS[args.command][0](args)


if __name__ == "__main__":
    sys.exit(main())
