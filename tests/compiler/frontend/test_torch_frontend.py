"""PyTorch frontend: torch modules through torch's ONNX export and our importer, vs torch itself."""

from __future__ import annotations

import numpy as np
import pytest

from tensorforge.compiler.frontend import from_onnx, from_torch
from tensorforge.compiler.graph import run_graph
from tensorforge.compiler.graph.passes import optimize

torch = pytest.importorskip("torch", reason="torch is an optional extra: pip install '.[torch]'")


def _check(module, *shapes, rtol=1e-4, atol=1e-5):
    torch.manual_seed(0)
    inputs = tuple(torch.randn(*s) for s in shapes)
    module = module.eval()
    with torch.no_grad():
        want = module(*inputs).numpy()
    graph = optimize(from_torch(module, inputs))
    feeds = {name: x.numpy() for name, x in zip(graph.inputs, inputs, strict=True)}
    got = run_graph(graph, feeds)[graph.outputs[0]]
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    return graph


def test_small_cnn_matches_torch():
    torch.manual_seed(1)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1),
        torch.nn.BatchNorm2d(16),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, stride=2, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(32, 10),
    )
    with torch.no_grad():  # non-trivial batch-norm statistics, so the BN fold is exercised
        net[1].running_mean.uniform_(-0.5, 0.5)
        net[1].running_var.uniform_(0.5, 2.0)
    graph = _check(net, (2, 3, 16, 16))
    assert not any(n.op == "BatchNormalization" for n in graph.nodes)


def test_mlp_with_gelu_and_softmax_matches_torch():
    net = torch.nn.Sequential(
        torch.nn.Linear(20, 64), torch.nn.GELU(), torch.nn.Linear(64, 7), torch.nn.Softmax(-1)
    )
    _check(net, (3, 20))


def test_transformer_encoder_layer_matches_torch():
    layer = torch.nn.TransformerEncoderLayer(
        d_model=32, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True
    )
    _check(layer, (1, 8, 32), atol=1e-4)


def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match="module must be a torch.nn.Module, not int"):
        from_torch(3, (torch.zeros(1),))
    with pytest.raises(TypeError, match=r"example_inputs\[0\] must be a torch.Tensor, not list"):
        from_torch(torch.nn.ReLU(), ([1.0],))


def test_compile_takes_a_torch_module_with_example_inputs():
    import tensorforge
    from tensorforge.compiler.frontend.onnx_builders import small_cnn

    torch.manual_seed(2)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.PReLU(8), torch.nn.Flatten())
    x = torch.randn(1, 3, 10, 10)
    module = tensorforge.compile(net, example_inputs=(x,))
    with torch.no_grad():
        want = net.eval()(x).numpy()
    (got,) = module.run(x).values()  # a torch tensor as the one input
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="needs example_inputs"):
        tensorforge.compile(net)
    with pytest.raises(ValueError, match="example_inputs belong to a torch.nn.Module"):
        tensorforge.compile(small_cnn(), example_inputs=(x,))


class _UserPatterns(torch.nn.Module):
    """What users write that once failed: a value returned twice, a whole sort, a scatter at
    computed positions, a masked assignment, a nearest resize by a non-integer factor."""

    def forward(self, x, mask):  # noqa: ANN001, ANN201
        y = x * 2
        rows = x.flatten(1)  # 300 values a row: more than TopK's selection steps
        values, order = torch.sort(rows, dim=-1, descending=True)
        filtered = rows.scatter(1, rows.topk(3).indices, 0.0)  # a sampler's top-k filter
        masked = x.clone()
        masked[mask] = -1.0  # exported as ScatterND at NonZero(mask)
        small = torch.nn.functional.interpolate(x, scale_factor=0.7, mode="nearest")
        return y, y, values, order, filtered, masked, small


def test_patterns_users_write_match_torch():
    import tensorforge

    torch.manual_seed(3)
    x = torch.randn(2, 3, 10, 10)
    mask = x > 0.5
    net = _UserPatterns()
    with torch.no_grad():
        want = [w.numpy() for w in net(x, mask)]
    got = list(tensorforge.compile(net, example_inputs=(x, mask)).run([x, mask]).values())
    assert len(got) == len(want)
    for ours, theirs in zip(got, want, strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-6)


def test_export_leaves_the_modules_training_mode_as_it_was():
    net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5), torch.nn.BatchNorm1d(4))
    net.train()
    net[2].eval()  # a frozen batch norm inside a model being trained
    from_torch(net, (torch.randn(2, 4),))
    assert [m.training for m in net.modules()] == [True, True, True, False]


def test_fold_of_unfold_matches_torch():
    # F.unfold exports as gathers, F.fold as Col2Im (opset 18): overlapping patches summed
    class FoldBack(torch.nn.Module):
        def forward(self, x):  # noqa: ANN001, ANN202
            cols = torch.nn.functional.unfold(x, (3, 2), padding=1, stride=(2, 1))
            return torch.nn.functional.fold(cols * 2, (7, 6), (3, 2), padding=1, stride=(2, 1))

    _check(FoldBack(), (2, 3, 7, 6))


def test_align_corners_interpolation_by_a_fractional_factor_matches_torch():
    # 3 * 1.5 = 4.5 rows: torch maps the 4 output rows' corners onto the input's
    class Up(torch.nn.Module):
        def forward(self, x, v):  # noqa: ANN001, ANN202
            f = torch.nn.functional.interpolate
            return (
                f(x, scale_factor=1.5, mode="bilinear", align_corners=True),
                f(x, scale_factor=(1.5, 0.7), mode="bicubic", align_corners=True),
                f(v, scale_factor=(2, 1.5, 2), mode="trilinear", align_corners=True),
            )

    torch.manual_seed(4)
    x, v = torch.randn(1, 2, 3, 5), torch.randn(1, 1, 2, 3, 3)
    net = Up()
    with torch.no_grad():
        want = [w.numpy() for w in net(x, v)]
    graph = optimize(from_torch(net, (x, v)))
    got = run_graph(graph, {graph.inputs[0]: x.numpy(), graph.inputs[1]: v.numpy()})
    for name, theirs in zip(graph.model_outputs, want, strict=True):
        np.testing.assert_allclose(got[name], theirs, rtol=1e-5, atol=1e-5)


def test_affine_grid_matches_torch():
    # F.affine_grid exports (TorchScript exporter, opset 20) as AffineGrid; an axis of one
    # position with align_corners is torch's 0 (onnxruntime and onnx's reference disagree)
    import io

    import onnx

    class Grid(torch.nn.Module):
        def forward(self, theta):  # noqa: ANN001, ANN202
            f = torch.nn.functional.affine_grid
            return f(theta, (2, 1, 3, 4), False), f(theta, (2, 1, 1, 5), True)

    theta = torch.randn(2, 2, 3)
    buffer = io.BytesIO()
    torch.onnx.export(Grid(), (theta,), buffer, dynamo=False, opset_version=20)
    model = onnx.load_from_string(buffer.getvalue())
    assert [n.op_type for n in model.graph.node].count("AffineGrid") == 2
    got = run_graph(graph := optimize(from_onnx(model)), {graph.inputs[0]: theta.numpy()})
    for name, want in zip(graph.model_outputs, Grid()(theta), strict=True):
        np.testing.assert_allclose(got[name], want.numpy(), rtol=1e-5, atol=1e-6)


def test_exported_reductions_are_valid_for_onnxruntime():
    # exported at opset 17 (converted down from torch's 18), torch.var / logsumexp / prod
    # carried ReduceMean's opset-18 noop_with_empty_axes, which onnxruntime refuses to load
    import onnxruntime as ort

    from tensorforge.compiler.frontend.torch import export_onnx

    class Stats(torch.nn.Module):
        def forward(self, x):  # noqa: ANN001, ANN202
            return torch.var(x, 1), torch.logsumexp(x, 0), x.prod(1), torch.linalg.norm(x)

    x = torch.randn(3, 5)
    model = export_onnx(Stats(), (x,))
    got = ort.InferenceSession(model.SerializeToString()).run(None, {"input0": x.numpy()})
    for ours, want in zip(got, Stats()(x), strict=True):
        np.testing.assert_allclose(ours, want.numpy(), rtol=1e-5, atol=1e-6)


class _Pairwise(torch.nn.Module):
    def forward(self, a, b):
        return torch.cdist(a, b)


def test_an_op_only_the_torchscript_exporter_knows_falls_back_to_it(capfd):
    """torch.cdist has no ONNX function in the torch.export-based exporter: the TorchScript
    one exports it, quietly (nothing on the process's stdout or stderr)."""
    _check(_Pairwise(), (3, 4), (5, 4))
    out, err = capfd.readouterr()
    assert out == "" and err == ""


class _Median(torch.nn.Module):
    def forward(self, x):
        return x.median(dim=1).values


def test_an_op_neither_exporter_knows_names_both_reasons(capfd):
    reasons = r"both of torch's exporters.*median.*TorchScript-based"
    with pytest.raises(ValueError, match=reasons) as e:
        from_torch(_Median(), (torch.zeros(2, 5),))
    assert "\x1b[" not in str(e.value)  # no terminal colours
    out, err = capfd.readouterr()
    assert out == "" and err == ""
