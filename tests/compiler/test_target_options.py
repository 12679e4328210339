"""Target strings: each kind accepts only the options its readers use; anything else, an empty
target or a malformed value is a ValueError that says what would be accepted."""

from __future__ import annotations

import pytest

import tensorforge
from tensorforge.compiler.codegen.gpu import Limits
from tensorforge.compiler.frontend.onnx_builders import mlp
from tensorforge.compiler.graph.compile_vta import vta_options, weight_scales
from tensorforge.compiler.target import KINDS, OPTIONS, Target, host

VALID = [
    "llvm",
    "llvm -mcpu=native",
    "llvm -mtriple=armv7a-linux-gnueabihf -mcpu=cortex-a9 -mattr=+neon,+vfp3",
    "llvm -mtriple=aarch64-linux-gnu",
    "cuda",
    "cuda -arch=sm_80",
    "cuda -arch=compute_90 -max_threads=512 -max_shared=49152",
    "cuda -arch=sm_90a",
    "opencl",
    "opencl -max_threads=128 -max_shared=16384",
    "vta",
    "vta -config=pynq -device=sim",
    "vta -config=tiny -device=cyclesim -mode=mul -vthreads=1",
    # the form the tuner and the design-space sweep write into their logs
    "vta -config=build/dse/xc7z020/candidates/287643f5301a7c41/hwconfig.json -device=cyclesim",
]


@pytest.mark.parametrize("text", VALID)
def test_valid_targets_parse_and_round_trip(text: str) -> None:
    target = Target.parse(text)
    assert str(target) == text
    assert Target.parse(str(target)) == target


def test_every_kind_declares_its_options() -> None:
    assert set(KINDS) == set(OPTIONS) == {"llvm", "cuda", "opencl", "vta"}
    assert OPTIONS["llvm"] == ("mattr", "mcpu", "mtriple")
    assert OPTIONS["vta"] == ("config", "depthwise", "device", "mode", "vthreads", "weights")
    assert set(OPTIONS["opencl"]) == {"max_threads", "max_shared"}
    assert set(OPTIONS["cuda"]) == {"arch", "max_threads", "max_shared"}
    assert str(host()) == "llvm -mcpu=native"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "vta -confg=tiny",
            "-confg=tiny: unknown option 'confg' for vta targets; options are config, depthwise, "
            "device, mode, vthreads, weights (in 'vta -confg=tiny')",
        ),
        (
            "vta -frobnicate=1",
            "-frobnicate=1: unknown option 'frobnicate' for vta targets; options are config, "
            "depthwise, device, mode, vthreads",
        ),
        ("llvm -frobnicate=1", "unknown option 'frobnicate' for llvm targets; options are mattr"),
        ("llvm -config=pynq", "unknown option 'config' for llvm targets"),
        ("opencl -arch=sm_80", "unknown option 'arch' for opencl targets; options are max_sh"),
        ("cuda -mcpu=native", "unknown option 'mcpu' for cuda targets; options are arch, max_sh"),
    ],
)
def test_unknown_options_are_errors_listing_the_accepted_ones(text: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        Target.parse(text)
    assert message in str(info.value)


@pytest.mark.parametrize("text", ["", " ", "\t\n  "])
def test_empty_or_blank_target_is_an_error_with_an_example(text: str) -> None:
    with pytest.raises(ValueError, match=r"target must be a non-empty string such as 'llvm', "):
        Target.parse(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("cuda -max_threads=0", "option 'max_threads' of cuda targets must be a positive integer"),
        ("opencl -max_threads=-4", "must be a positive integer, not '-4'"),
        ("opencl -max_shared=lots", "option 'max_shared' of opencl targets must be a positive"),
        ("cuda -arch=80", "option 'arch' of cuda targets must be a CUDA arch such as sm_80"),
        ("cuda -arch=sm80", "must be a CUDA arch such as sm_80 or compute_80, not 'sm80'"),
        ("llvm -mcpu", "-mcpu: option 'mcpu' of llvm targets needs a value: -mcpu=VALUE"),
        ("vta -config=", "option 'config' of vta targets needs a value"),
        ("llvm --", "target option must look like -key=value, not '--'"),
        ("llvm mcpu=native", "target option must look like -key=value, not 'mcpu=native'"),
        ("tpu", "target kind must be one of llvm, cuda, opencl, vta, not 'tpu'"),
    ],
)
def test_malformed_values_are_named(text: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        Target.parse(text)
    assert message in str(info.value)


def test_non_string_target_is_an_error() -> None:
    with pytest.raises(ValueError, match="target must be a string such as 'llvm'"):
        Target.parse(None)  # type: ignore[arg-type]


def test_constructing_a_target_checks_it_too() -> None:
    with pytest.raises(ValueError, match="unknown option 'confg' for vta targets"):
        Target("vta", (("confg", "tiny"),))
    with pytest.raises(ValueError, match="target kind must be one of"):
        Target("tpu")


def test_readers_see_the_validated_options() -> None:
    limits = Limits.of(Target.parse("opencl -max_threads=128 -max_shared=16384"))
    assert (limits.max_threads, limits.max_shared) == (128, 16384)
    assert Limits.of(Target.parse("cuda")).max_threads == 1024
    _, device, mode, vthreads = vta_options(Target.parse("vta -device=cyclesim -vthreads=1"))
    assert (device, mode, vthreads) == ("cyclesim", "mul", 1)  # pynq has the ALU's MUL
    assert vta_options(Target.parse("vta -mode=shift"))[2] == "shift"
    assert weight_scales(Target.parse("vta"), "mul") == "per-channel"
    assert weight_scales(Target.parse("vta"), "shift") == "per-tensor"
    assert weight_scales(Target.parse("vta -weights=per-tensor"), "mul") == "per-tensor"
    with pytest.raises(ValueError, match="-weights=per-channel needs -mode=mul"):
        weight_scales(Target.parse("vta -weights=per-channel -mode=shift"), "shift")
    with pytest.raises(ValueError, match="-weights must be one of per-channel, per-tensor"):
        weight_scales(Target.parse("vta -weights=per-row"), "mul")


def test_mode_mul_on_a_config_without_the_alu_mul_is_refused_by_name(tmp_path) -> None:
    """Found by the accelerator fuzzer: the option was refused only by the first layer's
    quantization (naming the layer and a ratio), and a model whose layers all stay on the CPU
    compiled with it."""
    from tensorforge.hw.config import HWConfig

    path = tmp_path / "nomul.json"
    path.write_text(HWConfig.preset("tiny").replace(name="nomul", alu_mul=False).to_json())
    with pytest.raises(ValueError, match="-mode=mul needs the ALU MUL extension, and HWConfig "
                                         "'nomul' has alu_mul=False: use -mode=shift"):  # fmt: skip
        vta_options(Target.parse(f"vta -config={path} -mode=mul"))
    assert vta_options(Target.parse(f"vta -config={path}"))[2] == "shift"  # the default
    with pytest.raises(ValueError, match="-mode=mul needs the ALU MUL"):
        tensorforge.compile(mlp(), target=f"vta -config={path} -mode=mul", progress=False)


@pytest.mark.parametrize("target", ["vta -confg=tiny", "llvm -frobnicate=1", "", " "])
def test_compile_rejects_bad_targets_before_compiling(target: str) -> None:
    # previously "-confg=tiny" compiled for the default config and "" raised IndexError
    with pytest.raises(ValueError, match=r"unknown option|non-empty string"):
        tensorforge.compile(mlp(), target=target, progress=False)
