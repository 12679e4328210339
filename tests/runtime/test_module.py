"""The module file format (TFMOD): round trip, errors naming file and offset, run-time checks."""

from __future__ import annotations

import dataclasses
import doctest
import json
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tensorforge
from tensorforge.compiler.frontend import from_onnx
from tensorforge.compiler.frontend.onnx_builders import mlp, small_cnn
from tensorforge.compiler.graph.compile import compile_graph
from tensorforge.runtime import container, executor
from tensorforge.runtime import module as module_mod
from tensorforge.runtime.device.cpu.loader import LoaderError
from tensorforge.runtime.module import MAGIC, VERSION, Module, ModuleFormatError

X = np.random.default_rng(0).standard_normal((2, 64)).astype(np.float32)


@pytest.fixture(scope="module")
def module() -> Module:
    return tensorforge.compile(mlp())


def _split(data: bytes) -> tuple[dict, bytes, int]:
    (length,) = struct.unpack_from("<I", data, len(MAGIC) + 4)
    start = len(MAGIC) + 8
    return json.loads(data[start : start + length]), data[start + length :], start + length


def _repack(header: dict, payload: bytes) -> bytes:
    """An edited header written back as a current (version 2) file, with a valid digest: the
    reader's consistency checks, not the digest, must catch the edit."""
    full = json.loads(json.dumps({k: v for k, v in header.items() if k != "digest"}))
    full["digest"] = container.digest(MAGIC, VERSION, full, payload)
    raw = json.dumps(full, sort_keys=True).encode()
    return MAGIC + struct.pack("<II", VERSION, len(raw)) + raw + payload


def test_docstring_examples_run() -> None:
    assert doctest.testmod(module_mod).failed == 0
    assert doctest.testmod(executor).failed == 0


def test_round_trip_keeps_kernels_calls_plan_and_constants(module: Module) -> None:
    loaded = Module.from_bytes(module.to_bytes())
    assert [(k.name, k.kind, k.params, k.payload) for k in loaded.kernels] == [
        (k.name, k.kind, k.params, k.payload) for k in module.kernels
    ]
    assert loaded.calls == module.calls
    assert (loaded.slots, loaded.arena_bytes) == (module.slots, module.arena_bytes)
    assert loaded.constants.keys() == module.constants.keys()
    for name, value in module.constants.items():
        np.testing.assert_array_equal(loaded.constants[name], value)
    assert loaded.stats == module.stats
    np.testing.assert_array_equal(
        loaded.run({"x": X})["softmax_12"], module.run({"x": X})["softmax_12"]
    )


def test_file_starts_with_magic_and_holds_no_pickle(module: Module, tmp_path: Path) -> None:
    path = tmp_path / "m.tfm"
    module.save(path)
    data = path.read_bytes()
    assert data.startswith(MAGIC)
    header, _, _ = _split(data)
    assert {s["name"] for s in header["sections"]} >= {f"kernel:{k.name}" for k in module.kernels}
    assert b"\x80\x04\x95" not in data[:64]  # a pickle protocol-4 header


def test_truncated_file_names_file_and_offset(module: Module, tmp_path: Path) -> None:
    path = tmp_path / "cut.tfm"
    data = module.to_bytes()
    path.write_bytes(data[:-100])
    with pytest.raises(ModuleFormatError, match=rf"{path}: offset \d+: section '.*' runs past"):
        Module.load(path)


def test_bad_magic_and_version_name_offsets(module: Module) -> None:
    data = module.to_bytes()
    with pytest.raises(ModuleFormatError, match=r"m.tfm: offset 0: not a TensorForge module"):
        Module.from_bytes(b"TFPROG\x00\x01" + data[8:], "m.tfm")
    bumped = data[:8] + struct.pack("<I", 7) + data[12:]
    with pytest.raises(ModuleFormatError, match=r"offset 8: format version 7"):
        Module.from_bytes(bumped, "m.tfm")


def test_constant_of_the_wrong_size_names_its_offset(module: Module) -> None:
    header, payload, base = _split(module.to_bytes())
    const = header["constants"][0]
    const["shape"] = [const["shape"][0] + 1, *const["shape"][1:]]
    data = _repack(header, payload)
    _, _, base = _split(data)
    section = next(s for s in header["sections"] if s["name"] == f"const:{const['name']}")
    with pytest.raises(ModuleFormatError) as info:
        Module.from_bytes(data, "w.tfm")
    assert f"w.tfm: offset {base + section['offset']}: constant {const['name']!r}" in str(
        info.value
    )


def test_header_missing_a_field_is_malformed(module: Module) -> None:
    header, payload, _ = _split(module.to_bytes())
    del header["calls"]
    with pytest.raises(ModuleFormatError, match=r"offset 16: malformed header: KeyError"):
        Module.from_bytes(_repack(header, payload), "h.tfm")


def test_container_errors_use_the_module_error_type() -> None:
    with pytest.raises(ModuleFormatError, match="offset 8: truncated header"):
        Module.from_bytes(MAGIC + b"\x01", "t.tfm")
    assert issubclass(ModuleFormatError, ValueError)
    assert container.MAX_HEADER_BYTES > 0


def _with_kernels(module: Module, kernels: list) -> Module:
    return Module(
        target=module.target,
        inputs=module.inputs,
        outputs=module.outputs,
        tensors=module.tensors,
        kernels=kernels,
        calls=module.calls,
        slots=module.slots,
        arena_bytes=module.arena_bytes,
        constants=module.constants,
    )


def test_unknown_kernel_kind_is_rejected_at_load(module: Module) -> None:
    other = _with_kernels(module, [dataclasses.replace(k, kind="metal") for k in module.kernels])
    with pytest.raises(
        ValueError,
        match=r"kernel kind must be one of \['cuda', 'llvm', 'loop', 'opencl', 'vta'\], "
        r"not 'metal'",
    ):
        other.run({"x": X})


def test_a_vta_kernel_that_is_not_a_program_image_is_named(module: Module) -> None:
    other = _with_kernels(module, [dataclasses.replace(k, kind="vta") for k in module.kernels])
    name = module.kernels[0].name
    with pytest.raises(ValueError, match=f"kernel '{name}'.*not a TensorForge program image"):
        other.run({"x": X})


def test_code_for_missing_cpu_features_is_refused(module: Module) -> None:
    kernel = module.kernels[0]
    meta = {**kernel.meta, "features": "+sse2,+tf-imaginary-feature"}
    kernels = [dataclasses.replace(kernel, meta=meta), *module.kernels[1:]]
    data = Module(
        target=module.target,
        inputs=module.inputs,
        outputs=module.outputs,
        tensors=module.tensors,
        kernels=kernels,
        calls=module.calls,
        slots=module.slots,
        arena_bytes=module.arena_bytes,
        constants=module.constants,
    ).to_bytes()
    with pytest.raises(LoaderError, match="missing tf-imaginary-feature"):
        Module.from_bytes(data).run({"x": X})


def test_inputs_are_checked(module: Module) -> None:
    with pytest.raises(ValueError, match=r"input 'x' must be float32\[2, 64\], not float64"):
        module.run({"x": X.astype(np.float64)})
    with pytest.raises(ValueError, match=r"inputs must be exactly \['x'\]"):
        module.run({"y": X})


def test_inputs_of_any_layout_or_byte_order_and_nested_lists_give_the_same_outputs(
    module: Module,
) -> None:
    (out,) = module.outputs
    expected = module.run({"x": X})[out]
    wide = np.zeros((2, 128), np.float32)
    wide[:, ::2] = X
    for value in (X.astype(">f4"), wide[:, ::2], np.asfortranarray(X), X.tolist()):
        np.testing.assert_array_equal(module.run({"x": value})[out], expected)
    with pytest.raises(ValueError, match=r"must be float32\[2, 64\], not >f8\[2, 64\]"):
        module.run({"x": X.astype(">f8")})  # another precision: still the caller's choice
    with pytest.raises(ValueError, match=r"must be float32\[2, 64\], not <U1\[2, 64\]"):
        module.run({"x": [["a"] * 64] * 2})


def test_a_list_is_never_converted_into_a_different_integer_value() -> None:
    from tensorforge.runtime.module import _as_input

    assert _as_input([[1, -2]], "int8").dtype == np.int8
    assert _as_input([[300]], "int8").dtype == np.int64  # the dtype check then refuses it
    assert _as_input([[1.5]], "int8").dtype == np.float64


def test_inputs_may_be_one_array_or_a_list_in_input_order(module: Module) -> None:
    (out,) = module.outputs
    expected = module.run({"x": X})[out]
    np.testing.assert_array_equal(module.run(X)[out], expected)
    np.testing.assert_array_equal(module.run([X])[out], expected)
    np.testing.assert_array_equal(module.run((X,))[out], expected)
    # one input's value as a nested list: its shape tells it from a list of inputs
    np.testing.assert_array_equal(module.run(X.tolist())[out], expected)
    np.testing.assert_array_equal(module.run([X.tolist()])[out], expected)
    with pytest.raises(ValueError, match=r"takes 1 input\(s\) \['x'\], not 2 values"):
        module.run([X, X])
    with pytest.raises(ValueError, match=r"takes 1 input\(s\) \['x'\], not 3 values"):
        module.run([X, X, X])  # three inputs of the right shape are not one input of [3, 2, 64]
    with pytest.raises(TypeError, match=r"inputs must be a dict .* not str"):
        module.run("x")


def test_one_array_for_a_model_of_several_inputs_is_refused() -> None:
    from tensorforge.compiler.frontend.onnx_builders import OnnxModelBuilder

    b = OnnxModelBuilder("two")
    two = tensorforge.compile(b.model([b.op("Add", [b.input("a", (2, 3)), b.input("b", (2, 3))])]))
    a, b = (np.full((2, 3), v, np.float32) for v in (1.0, 2.0))
    (out,) = two.outputs
    np.testing.assert_array_equal(two.run([a, b])[out], a + b)
    with pytest.raises(ValueError, match=r"takes 2 inputs .* not one array"):
        two.run(a)


def test_call_binding_a_tensor_of_the_wrong_size_is_rejected(module: Module) -> None:
    tensors = dict(module.tensors)
    first = module.calls[0].args[0]
    tensors[first] = module_mod.TensorSpec((3, 64), "float32")
    with pytest.raises(ValueError, match=rf"argument p0 of kernel .* not {first!r}"):
        Module(
            target=module.target,
            inputs=module.inputs,
            outputs=module.outputs,
            tensors=tensors,
            kernels=module.kernels,
            calls=module.calls,
            slots=module.slots,
            arena_bytes=module.arena_bytes,
            constants=module.constants,
        )


def test_loading_and_running_a_module_never_imports_the_compiler(
    module: Module, tmp_path: Path
) -> None:
    path = tmp_path / "m.tfm"
    module.save(path)
    np.save(tmp_path / "x.npy", X)
    script = (
        "import sys, numpy as np\n"
        "from tensorforge.runtime.module import Module\n"
        f"out = Module.load({str(path)!r}).run({{'x': np.load({str(tmp_path / 'x.npy')!r})}})\n"
        "np.save(sys.argv[1], out['softmax_12'])\n"
        "print(sorted(k for k in sys.modules if k.startswith('tensorforge.compiler')))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "y.npy")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.strip() == "[]"
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), module.run({"x": X})["softmax_12"])


def _onnxruntime_output(x: np.ndarray) -> np.ndarray:
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(mlp().SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def _bound_in_place(module: Module) -> None:
    """Every constant is read-only, aligned, and the executor's binding is that very memory."""
    views = module._load().views
    for name, value in module.constants.items():
        assert not value.flags.writeable and value.ctypes.data % 64 == 0, name
        assert np.shares_memory(views[name], value), name
        assert views[name].ctypes.data == value.ctypes.data, name


def test_a_loaded_module_holds_each_constant_once(
    module: Module, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "m.tfm"
    module.save(path)
    data = path.read_bytes()
    header, _, base = _split(data)
    assert header["align"] == 64 and base % 64 == 0
    assert all(s["offset"] % 64 == 0 for s in header["sections"])
    read: list[memoryview] = []  # the buffer `load` reads the file into

    def read_aligned(p: Path) -> memoryview:
        read.append(real(p))
        return read[-1]

    real = container.read_aligned
    monkeypatch.setattr(container, "read_aligned", read_aligned)
    loaded = Module.load(path)
    out = loaded.run({"x": X})["softmax_12"]
    _bound_in_place(loaded)
    (buffer,) = read
    file_bytes = np.frombuffer(buffer, np.uint8)
    for name, value in loaded.constants.items():  # views of the file's bytes, not copies
        entry = next(s for s in header["sections"] if s["name"] == f"const:{name}")
        assert value.ctypes.data == file_bytes.ctypes.data + base + entry["offset"], name
        np.testing.assert_array_equal(value, module.constants[name])
    np.testing.assert_array_equal(out, module.run({"x": X})["softmax_12"])
    np.testing.assert_allclose(out, _onnxruntime_output(X), rtol=1e-5, atol=1e-6)


def test_a_compiled_module_binds_its_constants_in_place(module: Module) -> None:
    module.run({"x": X})
    _bound_in_place(module)


def test_compiling_copies_no_constant_into_the_module() -> None:
    """The graph's constants and the kernels' pre-packed weights are made aligned, so the
    module holds those very arrays: a constant the kernels read as is stays the graph's."""
    graph = from_onnx(small_cnn())
    compiled = compile_graph(graph, progress=False)
    kept = [n for n in compiled.constants if n in graph.constants]
    assert kept  # (the bias of the final dense layer: the oracle of this test)
    for name in kept:
        assert compiled.constants[name].ctypes.data == graph.constants[name].ctypes.data, name
    for value in graph.constants.values():
        assert value.ctypes.data % 64 == 0 and not value.flags.writeable
    x = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(
        small_cnn().SerializeToString(), providers=["CPUExecutionProvider"]
    )
    np.testing.assert_allclose(
        next(iter(compiled.run({"x": x}).values())), session.run(None, {"x": x})[0],
        rtol=1e-4, atol=1e-5,
    )  # fmt: skip


def test_version_2_files_load_and_their_constants_are_copied_aligned_once(
    module: Module,
) -> None:
    """A file written before format 3: sections packed back to back after an unpadded header;
    read in place of alignment, it still loads (digest checked) and runs alike."""
    header, _, _ = _split(module.to_bytes())
    old = container.pack(MAGIC, 2, {k: v for k, v in header.items() if k != "align"}, [
        (s["name"], _section_bytes(module, s["name"])) for s in header["sections"]
    ])  # fmt: skip
    assert "align" not in _split(old)[0]
    loaded = Module.from_bytes(old, "old.tfm")
    out = loaded.run({"x": X})["softmax_12"]
    _bound_in_place(loaded)
    np.testing.assert_array_equal(out, module.run({"x": X})["softmax_12"])
    with pytest.raises(ModuleFormatError, match="old.tfm: offset 16: checksum mismatch"):
        Module.from_bytes(old[:-1] + bytes([old[-1] ^ 1]), "old.tfm")


def _section_bytes(module: Module, name: str) -> bytes:
    kind, _, key = name.partition(":")
    if kind == "kernel":
        return next(bytes(k.payload) for k in module.kernels if k.name == key)
    return module.constants[key].tobytes()


def test_an_input_that_is_also_a_constant_is_refused(module: Module) -> None:
    header, payload, _ = _split(module.to_bytes())
    const = header["constants"][0]["name"]
    header["inputs"] = [*header["inputs"], const]
    with pytest.raises(ModuleFormatError, match=f"input {const!r} must not be a constant"):
        Module.from_bytes(_repack(header, payload), "i.tfm")


def test_tensorforge_load_reads_a_saved_module(module: Module, tmp_path: Path) -> None:
    import tensorforge

    path = tmp_path / "m.tfm"
    module.save(path)
    loaded = tensorforge.load(path)
    assert isinstance(loaded, Module)
    np.testing.assert_allclose(loaded.run({"x": X})["softmax_12"], _onnxruntime_output(X),
                               rtol=1e-5, atol=1e-6)  # fmt: skip
