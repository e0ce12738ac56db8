"""One configuration object that every knob goes through.

Precedence, lowest first: built-in defaults (mirrored, with comments, in
``graphfuser/configs/default.yaml``, shipped inside the package: ``DEFAULT_YAML``) < the YAML file
named by ``GRAPHFUSER_CONFIG`` < environment variables (the TorchScript nvFuser names) < explicit
API calls (``graphfuser.set_single_node_mode(True)``, ``graphfuser.fuser(...)``,
``torch.compile(..., options={...})``, whose keys are the same knob names: ``options_to_knobs``).

Example::

    >>> from graphfuser.config import config
    >>> config.single_node_mode
    False
    >>> with config.override(single_node_mode=True):
    ...     config.single_node_mode
    True
"""
from __future__ import annotations

import contextlib
import copy
import os
from pathlib import Path
from typing import Any, Iterator

import yaml

DEFAULT_YAML = Path(__file__).resolve().parent / "configs" / "default.yaml"

DISABLE_OPTIONS = (
    "fallback", "fma", "index_hoist", "predicate_elimination", "prefetch", "unroll_with_rng", "compile_cache",
    "bias_decomposition", "batch_norm_training", "fused_rng", "cuda_graphs", "column_sums",
    "calling_thread_backward", "conv_layout", "cuda_batch_norm_training", "cuda_graphs_training",
    "attention_rewrite", "gemm_padding", "weight_cast_batching", "rotary_rewrite", "padded_outputs",
    "bias_gradients", "conv_layout_training", "fast_math", "flip_fusion", "precompiled_prelude",
    "row_layout", "sdpa_math", "vector_gather", "even_rows", "broadcast_copies",
    "sdpa_bias", "dense_unbind", "layer_norm_statistics", "masked_loads", "max_pool_kernel",
)
ENABLE_OPTIONS = ("complex", "linear_decomposition", "conv_decomposition", "emulate_precision_casts",
                  "cuda_batch_norm_training", "lineinfo", "fused_rng", "conv_layout_training", "weight_cache")   # on by default, accepted:
# fused_rng, cuda_batch_norm_training, conv_layout_training
DUMP_OPTIONS = (
    "fusion_ir", "kernel_ir", "cuda_kernel", "cpp_kernel", "launch_param", "kernel_args",
    "python_definition", "scheduler_params", "dump_eff_bandwidth",
)
LOG_FILES = (
    "profiling_graph_executor_impl", "graph_fuser", "partition", "guard", "kernel_cache",
    "executor", "compile",
)

DEFAULTS: dict[str, Any] = {
    "enabled": True,
    "profiling_runs": 2,
    "single_node_mode": False,
    "horizontal_mode": True,
    "guard_mode": True,
    "skip_node_kinds": [],
    "max_specializations": 8,
    "compile_threads": 0,
    "fuse_cpu": True,
    "fuse_cuda": True,
    "disable": [],
    "enable": [],
    "dump": [],
    "log_level": "",
    "cache_dir": None,
    "repro_dir": None,
    "emulate_precision_casts": False,
    "check_every": 0,
    "cpu": {
        "cxx": "g++",
        "cxxflags": ["-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-std=c++17", "-fwrapv", "-fno-math-errno", "-fno-trapping-math"],
        "omp_threshold": 65536,
    },
    "cuda": {"block_size": 256, "unroll": 2, "blocks_per_sm": 64,
             "reduction_register_elements": 32, "reduction_min_threads": None, "reduction_blocks_per_sm": None,
             "column_blocks_per_sm": None,
             "reduction_row_block_threads": None, "reduction_outer_split_rows": None,
             "reduction_outer_split_block_y": None,
             "reduction_prefetch_stages": None, "reduction_cache_computed": True, "launch_api": "shim",
             "linear_bias_split": "auto"},
}

# Knobs that change generated code: part of every kernel cache key.
CODEGEN_KNOBS = ("fma", "index_hoist", "predicate_elimination", "prefetch", "unroll_with_rng", "fast_math",
                 "vector_gather", "even_rows", "masked_loads")

# Deliberate deviations from eager, each named once with the knob setting that removes it. A
# result that differs from eager only by one of these is not a defect (the fuzzer reports such
# differences separately); any other difference is.
DEVIATIONS: dict[str, dict[str, Any]] = {
    "reduced_precision_intermediates": {
        "knob": "emulate_precision_casts",
        "exact_when": True,
        "doc": ("fp16/bf16 intermediates of a fused chain stay in fp32 (nvFuser's and Inductor's "
                "policy), where eager rounds every op's result to fp16/bf16. With "
                "emulate_precision_casts on, every intermediate is rounded to its eager dtype, so "
                "pointwise chains match eager bit for bit. Not covered: ops that compute a*b+c "
                "inside one op (add/sub with alpha, addcmul, lerp), where eager itself rounds "
                "differently in its vector body (fma) and its scalar tail; and transcendental "
                "functions, whose fp32 results differ in the last bit between math libraries."),
    },
}


class ConfigError(ValueError):
    """A knob got a value it does not accept; the message lists the valid ones."""


def parse_token_list(value: str | list | tuple, valid: tuple[str, ...], what: str) -> list[str]:
    """Split ``"a,b"`` (or a list) and check each token against ``valid``."""
    if isinstance(value, str):
        tokens = [t.strip() for t in value.split(",") if t.strip()]
    else:
        tokens = [str(t).strip() for t in value]
    for tok in tokens:
        if tok not in valid:
            raise ConfigError(f"{what}: unknown option {tok!r}; valid options are: {', '.join(valid)}")
    return tokens


def parse_log_level(spec: str) -> dict[str, int]:
    """``">partition:graph_fuser:>>kernel_cache"`` -> ``{"partition": 1, "graph_fuser": 0, ...}``.

    As in TorchScript's ``PYTORCH_JIT_LOG_LEVEL``: each ``:``-separated entry names a file, and
    each leading ``>`` raises its verbosity (0 = graph dumps, 1 = updates, 2 = debug). A file
    enabled at level N logs everything at levels <= N.
    """
    levels: dict[str, int] = {}
    for entry in (e.strip() for e in spec.split(":")):
        if not entry:
            continue
        level = len(entry) - len(entry.lstrip(">"))
        name = entry.lstrip(">").removesuffix(".cpp").removesuffix(".py")
        if name not in LOG_FILES:
            raise ConfigError(
                f"PYTORCH_JIT_LOG_LEVEL: unknown log name {name!r}; valid names are: {', '.join(LOG_FILES)}"
            )
        levels[name] = max(levels.get(name, -1), level)
    return levels


def _merge(base: dict, extra: dict, where: str) -> None:
    for key, value in extra.items():
        if key not in base:
            raise ConfigError(f"{where}: unknown knob {key!r}; valid knobs are: {', '.join(base)}")
        if isinstance(base[key], dict) and isinstance(value, dict):
            _merge(base[key], value, f"{where}.{key}")
        else:
            base[key] = value


def options_to_knobs(options: dict[str, Any]) -> dict[str, Any]:
    """Compile options as knobs: the same names as the YAML file's keys, nested sections either
    as dicts or dotted (``{"cpu.cxx": "clang++"}`` is ``{"cpu": {"cxx": "clang++"}}``).
    ``Config.set`` checks them (an unknown name raises ``ConfigError`` listing the valid ones)."""
    out: dict[str, Any] = {}
    for key, value in options.items():
        if not isinstance(key, str):
            raise ConfigError(f"options: keys are knob names, got {key!r}; valid knobs are: {', '.join(DEFAULTS)}")
        *path, last = key.split(".")
        d = out
        for p in path:
            d = d.setdefault(p, {})
            if not isinstance(d, dict):
                raise ConfigError(f"options: {key!r} names a section of {p!r}, which is not a section")
        if isinstance(value, dict) and isinstance(d.get(last), dict):
            d[last].update(value)
        else:
            d[last] = value
    return out


class Config:
    """The knobs, resolved once from defaults, YAML and environment; mutable through the API."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        self._values: dict[str, Any] = {}
        self._log_levels: dict[str, int] = {}
        self.reload(env)

    # -- loading -------------------------------------------------------------------------
    def reload(self, env: dict[str, str] | None = None) -> None:
        """Re-read defaults, ``GRAPHFUSER_CONFIG`` and the environment (drops API overrides)."""
        env = dict(os.environ) if env is None else env
        values = copy.deepcopy(DEFAULTS)
        path = env.get("GRAPHFUSER_CONFIG")
        if path:
            with open(path) as f:
                _merge(values, yaml.safe_load(f) or {}, path)
        if env.get("PYTORCH_JIT_ENABLE_NVFUSER") is not None:
            values["enabled"] = env["PYTORCH_JIT_ENABLE_NVFUSER"].strip() not in ("0", "false", "False", "")
        for var, key in (("PYTORCH_NVFUSER_DISABLE", "disable"), ("PYTORCH_NVFUSER_ENABLE", "enable"),
                         ("PYTORCH_NVFUSER_DUMP", "dump")):
            if env.get(var):
                values[key] = list(values[key]) + [t for t in env[var].split(",") if t.strip()]
        if env.get("PYTORCH_JIT_LOG_LEVEL"):
            values["log_level"] = env["PYTORCH_JIT_LOG_LEVEL"]
        if env.get("GRAPHFUSER_CACHE_DIR"):
            values["cache_dir"] = env["GRAPHFUSER_CACHE_DIR"]
        if env.get("GRAPHFUSER_CHECK_EVERY"):
            values["check_every"] = env["GRAPHFUSER_CHECK_EVERY"].strip()
        if env.get("CXX"):
            values["cpu"]["cxx"] = env["CXX"]
        self._values = values
        self._validate()

    def _validate(self) -> None:
        v = self._values
        v["disable"] = parse_token_list(v["disable"], DISABLE_OPTIONS, "PYTORCH_NVFUSER_DISABLE")
        v["enable"] = parse_token_list(v["enable"], ENABLE_OPTIONS, "PYTORCH_NVFUSER_ENABLE")
        v["dump"] = parse_token_list(v["dump"], DUMP_OPTIONS, "PYTORCH_NVFUSER_DUMP")
        if "emulate_precision_casts" in v["enable"]:
            v["emulate_precision_casts"] = True
        v["emulate_precision_casts"] = bool(v["emulate_precision_casts"])
        self._log_levels = parse_log_level(v["log_level"] or "")
        self.fusion_on = bool(v["enabled"])     # read on every fused call: a plain attribute
        try:
            v["check_every"] = int(v["check_every"] or 0)
        except (TypeError, ValueError):
            raise ConfigError(f"check_every (GRAPHFUSER_CHECK_EVERY) must be an integer >= 0, got "
                              f"{v['check_every']!r}") from None
        if v["check_every"] < 0:
            raise ConfigError(f"check_every (GRAPHFUSER_CHECK_EVERY) must be >= 0 (0: off), got {v['check_every']}")
        if v["cuda"].get("linear_bias_split") not in ("auto", True, False, None):
            raise ConfigError(f"cuda.linear_bias_split must be auto, true or false, got {v['cuda']['linear_bias_split']!r}")
        if int(v["profiling_runs"]) < 1:
            raise ConfigError("profiling_runs must be >= 1")

    # -- access --------------------------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        values = self.__dict__.get("_values")
        if values is not None and name in values:
            return values[name]
        raise AttributeError(name)

    def set(self, **kwargs: Any) -> None:
        """Set knobs by name (the API level of precedence); a rejected value changes nothing."""
        saved = copy.deepcopy(self._values)
        try:
            _merge(self._values, kwargs, "graphfuser.config")
            self._validate()
        except Exception:
            self._values = saved
            self._validate()
            raise

    @contextlib.contextmanager
    def override(self, **kwargs: Any) -> Iterator["Config"]:
        """Temporarily set knobs; restores the previous values on exit."""
        saved = copy.deepcopy(self._values)
        self.set(**kwargs)
        try:
            yield self
        finally:
            self._values = saved
            self._validate()

    def is_disabled(self, option: str) -> bool:
        return option in self._values["disable"]

    def is_enabled(self, option: str) -> bool:
        return option in self._values["enable"]

    def dumps(self, option: str) -> bool:
        return option in self._values["dump"]

    def log_level(self, name: str) -> int:
        """Verbosity for a log name, -1 when off."""
        return self._log_levels.get(name, -1)

    def codegen_key(self) -> tuple:
        """The knobs that change generated code, for kernel cache keys."""
        key = tuple(sorted(k for k in CODEGEN_KNOBS if self.is_disabled(k)))
        return key + (("emulate_precision_casts",) if self._values["emulate_precision_casts"] else ())

    def as_dict(self) -> dict[str, Any]:
        return copy.deepcopy(self._values)


config = Config()
