"""Where the time goes: one profiling tool, a subcommand per question.

    python -m graphfuser prof infer --device cuda --models regnet_y_800mf,timm:levit_128s
    python -m graphfuser prof train --only RMSNorm,GELU
    python -m graphfuser prof zoo-train --device cuda --models resnet50 --top 30
    python -m graphfuser prof race-row --rows gpt2:infer-bf16 --backends eager,inductor_ro,graphfuser_compile
    python -m graphfuser prof bn-shapes --device cuda
    python -m graphfuser prof cold --device cuda --rows gpt2:train-bf16,llama:infer-bf16
    python -m graphfuser prof outer-sums --device cuda
    python -m graphfuser prof <subcommand> --help

``infer``: inference of zoo models, eager vs ``torch.jit.script`` vs graphfuser (wall, enqueue and
kernel time, host split, launches). ``train``: per-kernel CUDA times of the training benchmark's
cases, graphfuser against torch.compile. ``zoo-train``: host time of a zoo model's training
step, eager vs graphfuser. Each prints text and never asserts.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from typing import Optional

# subcommand -> (module, one line of help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "infer": ("infer", "inference of zoo models: wall, enqueue and kernel time, host split, launches"),
    "train": ("train", "per-kernel CUDA times of the training benchmark's cases, graphfuser vs torch.compile"),
    "zoo-train": ("zoo_train", "host time of a zoo model's training step, eager vs graphfuser"),
    "race-row": ("race_row", "kernel timeline of a race row, each backend side by side"),
    "bn-shapes": ("bn_shapes", "batch norm (train) + ReLU kernel time at a model's shapes, channels-last and NCHW"),
    "cold": ("cold", "a race row's cold start through the backend, by phase, beside Dynamo alone"),
    "outer-sums": ("outer_sums", "column sums and layer-norm backwards: kernel time, eager vs Inductor vs graphfuser"),
}


def main(argv: Optional[list[str]] = None) -> int:
    """``prof <subcommand> [flags]``: run one profiler; ``prof <subcommand> --help`` lists its flags."""
    epilog = "subcommands:\n" + "\n".join(f"  {name:10s} {text}" for name, (_, text) in SUBCOMMANDS.items())
    parser = argparse.ArgumentParser(prog="python -m graphfuser prof", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=epilog)
    parser.add_argument("subcommand", choices=list(SUBCOMMANDS), metavar="subcommand",
                        help="one of: " + ", ".join(SUBCOMMANDS))
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the subcommand's flags")
    ns = parser.parse_args(sys.argv[1:] if argv is None else argv)
    module = importlib.import_module(f"{__name__}.{SUBCOMMANDS[ns.subcommand][0]}")
    return module.main(ns.args)
