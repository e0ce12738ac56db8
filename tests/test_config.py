"""Config: defaults == graphfuser/configs/default.yaml; defaults < GRAPHFUSER_CONFIG < env < API; token checks."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

import graphfuser
from graphfuser.config import DEFAULT_YAML, DEFAULTS, DISABLE_OPTIONS, DUMP_OPTIONS, ENABLE_OPTIONS, LOG_FILES, Config, \
    ConfigError, config, parse_log_level

ROOT = Path(__file__).resolve().parents[1]


def test_defaults_match_default_yaml():
    with open(DEFAULT_YAML) as f:
        from_yaml = yaml.safe_load(f)
    assert from_yaml == DEFAULTS          # every key present, with the same value, and no extra


def test_default_yaml_is_a_valid_config_file(tmp_path):
    c = Config(env={"GRAPHFUSER_CONFIG": str(DEFAULT_YAML)})
    assert c.as_dict() == Config(env={}).as_dict()


def test_env_free_config_is_the_defaults():
    assert Config(env={}).as_dict() == DEFAULTS


def write_yaml(tmp_path, data) -> str:
    path = tmp_path / "gf.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_precedence_defaults_yaml_env_api(tmp_path):
    path = write_yaml(tmp_path, {"enabled": False, "profiling_runs": 5, "log_level": ">partition",
                                 "cache_dir": "/from/yaml", "cpu": {"cxx": "clang++"}, "disable": ["fma"]})
    c = Config(env={"GRAPHFUSER_CONFIG": path})
    assert (c.enabled, c.profiling_runs, c.cache_dir) == (False, 5, "/from/yaml")
    assert c.as_dict()["log_level"] == ">partition" and c.log_level("partition") == 1  # log_level() is the query
    assert c.cpu["cxx"] == "clang++" and c.cpu["cxxflags"] == DEFAULTS["cpu"]["cxxflags"]  # nested merge
    assert c.single_node_mode is DEFAULTS["single_node_mode"]                                # untouched

    env = {"GRAPHFUSER_CONFIG": path, "PYTORCH_JIT_ENABLE_NVFUSER": "1", "PYTORCH_JIT_LOG_LEVEL": "graph_fuser",
           "GRAPHFUSER_CACHE_DIR": "/from/env", "CXX": "g++-13", "PYTORCH_NVFUSER_DISABLE": "index_hoist"}
    c = Config(env=env)
    assert (c.enabled, c.cache_dir, c.cpu["cxx"]) == (True, "/from/env", "g++-13")
    assert c.as_dict()["log_level"] == "graph_fuser"
    assert c.profiling_runs == 5                                                              # yaml still
    assert c.is_disabled("index_hoist") and c.is_disabled("fma")     # token lists add up level by level
    assert c.log_level("graph_fuser") == 0 and c.log_level("partition") == -1

    c.set(enabled=False, cache_dir="/from/api", profiling_runs=1, cpu={"cxx": "icpx"})
    assert (c.enabled, c.cache_dir, c.profiling_runs, c.cpu["cxx"]) == (False, "/from/api", 1, "icpx")
    c.reload(env)                                                     # reload drops API overrides
    assert c.enabled is True and c.cache_dir == "/from/env"


def test_unknown_yaml_knob(tmp_path):
    path = write_yaml(tmp_path, {"single_node_mod": True})
    with pytest.raises(ConfigError, match=r"unknown knob 'single_node_mod'; valid knobs are: .*single_node_mode"):
        Config(env={"GRAPHFUSER_CONFIG": path})
    path = write_yaml(tmp_path, {"cpu": {"cflags": []}})
    with pytest.raises(ConfigError, match=r"unknown knob 'cflags'.*cxxflags"):
        Config(env={"GRAPHFUSER_CONFIG": path})


def test_empty_yaml_is_fine(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("")
    assert Config(env={"GRAPHFUSER_CONFIG": str(path)}).as_dict() == DEFAULTS


@pytest.mark.parametrize("value, enabled", [("0", False), ("false", False), ("1", True), ("true", True)])
def test_enable_nvfuser_env(value, enabled):
    assert Config(env={"PYTORCH_JIT_ENABLE_NVFUSER": value}).enabled is enabled


@pytest.mark.parametrize("var, valid", [("PYTORCH_NVFUSER_DISABLE", DISABLE_OPTIONS),
                                        ("PYTORCH_NVFUSER_ENABLE", ENABLE_OPTIONS),
                                        ("PYTORCH_NVFUSER_DUMP", DUMP_OPTIONS)])
def test_unknown_tokens_list_the_valid_ones(var, valid):
    with pytest.raises(ConfigError) as info:
        Config(env={var: f"{valid[0]},bogus_token"})
    msg = str(info.value)
    assert var in msg and "'bogus_token'" in msg
    assert all(v in msg for v in valid)
    c = Config(env={var: ",".join(valid)})                 # every valid token is accepted
    key = {"PYTORCH_NVFUSER_DISABLE": "disable", "PYTORCH_NVFUSER_ENABLE": "enable",
           "PYTORCH_NVFUSER_DUMP": "dump"}[var]
    assert getattr(c, key) == list(valid)


def test_unknown_log_name_lists_the_valid_ones():
    with pytest.raises(ConfigError) as info:
        Config(env={"PYTORCH_JIT_LOG_LEVEL": ">partition:graph_fusr"})
    msg = str(info.value)
    assert "PYTORCH_JIT_LOG_LEVEL" in msg and "'graph_fusr'" in msg and all(n in msg for n in LOG_FILES)


def test_log_level_syntax():
    assert parse_log_level(">partition:graph_fuser:>>kernel_cache") == {
        "partition": 1, "graph_fuser": 0, "kernel_cache": 2}
    assert parse_log_level("graph_fuser.cpp:>guard.py") == {"graph_fuser": 0, "guard": 1}
    assert parse_log_level("") == {}
    c = Config(env={"PYTORCH_JIT_LOG_LEVEL": ">>partition"})
    assert c.log_level("partition") == 2 and c.log_level("guard") == -1


def test_bad_api_values_are_rejected_and_change_nothing():
    c = Config(env={})
    before = c.as_dict()
    for bad in [dict(disable=["bogus"]), dict(dump="nope"), dict(log_level=">nowhere"), dict(profiling_runs=0),
                dict(no_such_knob=1), dict(single_node_mode=True, enable=["x"])]:
        with pytest.raises(ConfigError):
            c.set(**bad)
        assert c.as_dict() == before, bad
    with pytest.raises(ConfigError):
        with c.override(single_node_mode=True, dump=["nope"]):
            pass
    assert c.as_dict() == before


def test_override_restores_even_on_error():
    c = Config(env={})
    with pytest.raises(RuntimeError):
        with c.override(single_node_mode=True, disable="fma,index_hoist"):
            assert c.single_node_mode and c.codegen_key() == ("fma", "index_hoist")
            raise RuntimeError("boom")
    assert c.single_node_mode is False and c.codegen_key() == ()


def test_codegen_key_tracks_codegen_knobs_only():
    c = Config(env={"PYTORCH_NVFUSER_DISABLE": "fallback"})
    assert c.codegen_key() == ()
    c.set(disable=["predicate_elimination", "fma", "fallback"])
    assert c.codegen_key() == ("fma", "predicate_elimination")


def test_setters_return_old_values():
    assert graphfuser.set_single_node_mode(True) is False
    assert graphfuser.set_single_node_mode(False) is True
    assert graphfuser.set_horizontal_mode(False) is True
    assert graphfuser.set_guard_mode(False) is True
    assert graphfuser.set_enabled(False) is True
    assert graphfuser.set_skip_node_kind("aten::add") is False
    assert graphfuser.set_skip_node_kind("aten::add", True) is True
    assert config.skip_node_kinds == ["aten::add"]
    assert graphfuser.set_skip_node_kind("aten::add", False) is True
    assert config.skip_node_kinds == []


def test_fuser_context_manager_restores():
    before = config.as_dict()
    with graphfuser.fuser(single_node_mode=True, horizontal_mode=False, max_specializations=3):
        assert config.enabled and config.single_node_mode and not config.horizontal_mode
        assert config.max_specializations == 3
    assert config.as_dict() == before
    with graphfuser.fuser(False):
        assert config.enabled is False
    assert config.as_dict() == before
    with pytest.raises(ValueError):
        with graphfuser.fuser(single_node_mode=True):
            raise ValueError
    assert config.as_dict() == before


def test_fuser_context_disables_fusion_for_new_functions():
    def f(x):
        return (x * 2.0).relu() + 1.0

    x = torch.rand(4, 8)
    with graphfuser.fuser(False):
        sf = graphfuser.script(f)
        for _ in range(3):
            torch.testing.assert_close(sf(x), f(x))
        assert "FusionGroup" not in str(sf.graph_for(x))


SUBPROCESS = """
import logging, torch, graphfuser
def f(x):
    return (x * 2.0).relu() + 1.0
sf = graphfuser.script(f)
x = torch.rand(4, 8)
for _ in range(3):
    torch.testing.assert_close(sf(x), f(x))
print("FUSED" if "FusionGroup" in str(sf.graph_for(x)) else "UNFUSED")
print("HANDLERS", [type(h).__name__ for h in logging.getLogger("graphfuser").handlers])
"""


def run_subprocess(env_extra: dict, tmp_path) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTORCH_", "GRAPHFUSER_CONFIG"))}
    env.update(env_extra)
    script = tmp_path / "run_fused.py"          # TorchScript needs the function's source file
    script.write_text(SUBPROCESS)
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                         timeout=120, cwd=str(ROOT))
    assert out.returncode == 0, out.stderr
    return out.stdout + out.stderr


def test_enable_nvfuser_0_disables_fusion_end_to_end(tmp_path):
    out = run_subprocess({"PYTORCH_JIT_ENABLE_NVFUSER": "0", "GRAPHFUSER_CACHE_DIR": str(tmp_path)}, tmp_path)
    assert "UNFUSED" in out
    # the library attaches only a NullHandler when no log is asked for
    assert "HANDLERS ['NullHandler']" in out


def test_bad_env_token_fails_at_import(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTORCH_")}
    env["PYTORCH_NVFUSER_DISABLE"] = "fma,not_an_option"
    out = subprocess.run([sys.executable, "-c", "import graphfuser"], env=env, capture_output=True, text=True,
                         timeout=120, cwd=str(ROOT))
    assert out.returncode != 0
    assert "ConfigError" in out.stderr and "'not_an_option'" in out.stderr and "index_hoist" in out.stderr
