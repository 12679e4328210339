"""The main job: the digits CNN in int8 with its layers on the simulated accelerator."""

from __future__ import annotations

import onnxruntime as ort

from tensorforge.digits import load_digits_assets, run_digits_demo


def test_int8_accuracy_on_the_accelerator_is_within_two_points_of_float(capsys):
    acc = run_digits_demo("pynq", backend="sim")
    model, split = load_digits_assets()
    session = ort.InferenceSession(str(model))
    logits = session.run(None, {"input": split["images"]})[0]
    assert acc["float"] == (logits.argmax(1) == split["labels"]).mean()  # onnxruntime agrees
    assert acc["int8"] >= acc["float"] - 0.02
    out = capsys.readouterr().out
    assert "on the accelerator: 3 of 4 conv/dense layers" in out
    assert "int8 requantization: mul (multiply+shift)" in out  # pynq has the ALU MUL
    for call in ("tf.qconv2d+tf.qmaxpool (conv2)", "tf.qconv2d (conv3)", "tf.qdense (dense)"):
        assert f"  {call} " in out


def test_cycle_accurate_backend_reports_cycles_and_writes_a_trace(capsys, tmp_path):
    run_digits_demo("tiny", backend="cyclesim", images=8, trace=str(tmp_path / "t.json"))
    out = capsys.readouterr().out
    assert "cycles = " in out and " ms of accelerator time at 100 MHz" in out
    assert (tmp_path / "t.json").stat().st_size > 0
