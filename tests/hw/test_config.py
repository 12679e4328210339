"""HWConfig: derived quantities against VTA's published table, validation, JSON round-trip."""

import json
import re

import pytest

from tensorforge.hw.config import PRESETS, HWConfig


def test_pynq_derives_vtas_default_buffers():
    # vta_facts.md §2.2: UOP 8192 x 4 B, INP 2048 x 16 B, WGT 1024 x 256 B, ACC 2048 x 64 B.
    cfg = HWConfig.preset("pynq")
    assert (cfg.batch, cfg.block_in, cfg.block_out) == (1, 16, 16)
    assert (cfg.uop_depth, cfg.inp_depth, cfg.wgt_depth, cfg.acc_depth) == (8192, 2048, 1024, 2048)
    assert (cfg.inp_elem_bytes, cfg.wgt_elem_bytes, cfg.acc_elem_bytes) == (16, 256, 64)
    assert cfg.out_depth == 2048 and cfg.out_buff_size == 32 * 1024
    assert cfg.bitstream_name == "1x16_i8w8a32_15_15_18_17"
    assert cfg.peak_gops == pytest.approx(51.2)  # 256 MACs x 2 ops x 100 MHz


def test_tiny_is_small():
    cfg = HWConfig.preset("tiny")
    assert (cfg.block_in, cfg.block_out) == (4, 4)
    assert max(cfg.inp_depth, cfg.wgt_depth, cfg.acc_depth) <= 256


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_json_round_trip(name):
    cfg = PRESETS[name]
    assert HWConfig.from_json(cfg.to_json()) == cfg
    assert json.loads(cfg.to_json())["log_block_in"] == cfg.log_block_in


@pytest.mark.parametrize(
    ("knob", "value", "message"),
    [
        ("log_block_in", 9, "HWConfig.log_block_in must be an int in [0, 6], not 9"),
        ("log_inp_width", 2, "only 8-bit inputs are supported"),
        ("axi_data_width", 48, "HWConfig.axi_data_width must be one of"),
        ("clock_mhz", 0, "HWConfig.clock_mhz must be in (0, 2000], not 0"),
        ("log_wgt_buff_size", 4, "HWConfig.log_wgt_buff_size must be at least log2(256)"),
        ("log_acc_buff_size", 19, "makes the GEMM format need 68 bits in word 1"),
        ("log_uop_buff_size", 19, "UOP depth of 131072, beyond the 16-bit sram_base field"),
        ("log_batch", True, "HWConfig.log_batch must be an int"),
        ("max_outstanding_reads", 0, "HWConfig.max_outstanding_reads must be an int in [1, 16]"),
    ],
)
def test_invalid_knob_is_named(knob, value, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace("]", r"\]")):  # fmt: skip
        HWConfig(**{knob: value})


def test_a_later_knob_at_its_default_keeps_earlier_dicts():
    """``max_outstanding_reads`` came after tuning logs and DSE results keyed by ``to_dict``:
    at its default (1) it is left out, so those keys stay; set, it round-trips."""
    pynq = HWConfig.preset("pynq")
    assert "max_outstanding_reads" not in pynq.to_dict()
    assert HWConfig.from_dict(pynq.to_dict()).max_outstanding_reads == 1
    four = pynq.replace(max_outstanding_reads=4)
    assert four.to_dict() == {**pynq.to_dict(), "max_outstanding_reads": 4}
    assert HWConfig.from_json(four.to_json()) == four


def test_unknown_knob_in_json_is_rejected():
    with pytest.raises(ValueError, match=r"unknown HWConfig knob\(s\) \['log_blocks'\]"):
        HWConfig.from_dict({"log_blocks": 4})


def test_load_accepts_preset_file_and_object(tmp_path):
    path = tmp_path / "c.json"
    cfg = HWConfig.preset("tiny").replace(name="mine", clock_mhz=150.0)
    path.write_text(cfg.to_json())
    assert HWConfig.load(path) == cfg
    assert HWConfig.load("tiny") == HWConfig.preset("tiny")
    assert HWConfig.load(cfg) is cfg
    with pytest.raises(ValueError, match="unknown HWConfig preset 'zynq'"):
        HWConfig.load("zynq")


@pytest.mark.parametrize(
    ("knobs", "why"),
    [({"log_block_in": 7}, r"log_block_in must be an int in \[0, 6\], not 7"),
     ({"log_blok_out": 4}, r"unknown HWConfig knob\(s\) \['log_blok_out'\]"),
     ({"alu_mul": "yes"}, "alu_mul must be a bool, not 'yes'")],
)  # fmt: skip
def test_a_bad_knob_in_a_config_file_is_refused_naming_the_file(tmp_path, knobs, why):
    # found by the accelerator fuzzer (benchmarks/vta_fuzz.py): `-config=my.json` with a bad
    # knob named the knob but not the file it came from
    path = tmp_path / "board.json"
    path.write_text(json.dumps({**HWConfig.preset("tiny").to_dict(), **knobs}))
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))}: .*{why}"):
        HWConfig.load(path)


@pytest.mark.parametrize("spec", [None, 3, 2.5])
def test_load_of_a_non_path_is_a_type_error_naming_what_it_takes(spec):
    # found by fuzzing: pathlib's "expected str, bytes or os.PathLike object", and Path(3)
    # would have opened file descriptor 3
    with pytest.raises(TypeError, match="preset name, a JSON file path or a HWConfig, not"):
        HWConfig.load(spec)


def test_replace_checks_knob_names_like_from_dict():
    tiny = HWConfig.preset("tiny")
    assert tiny.replace(log_batch=1).batch == 2
    with pytest.raises(ValueError, match=r"unknown HWConfig knob\(s\) \['foo'\]"):
        tiny.replace(foo=1)
