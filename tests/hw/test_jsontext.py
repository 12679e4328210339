"""JSON nested too deeply for Python's parser (found by fuzzing: ``"[" * 100_000`` raised a bare
RecursionError out of every reader) is refused by each reader like any other malformed JSON,
with its own error naming the file."""

from __future__ import annotations

import doctest
import io
import json
import warnings

import numpy as np
import pytest

from tensorforge.compiler.autotune.log import LogWarning, load_records
from tensorforge.compiler.dse.space import HwSpace, SpaceFileError
from tensorforge.hw import jsontext
from tensorforge.hw.config import HWConfig
from tensorforge.runtime.device.gpu import GPUError, parse_payload
from tensorforge.runtime.rpc.codec import PayloadError, unpack

DEEP = "[" * 100_000


def test_loads_refuses_deep_nesting_as_a_decode_error():
    with pytest.raises(json.JSONDecodeError, match="nested more deeply"):
        jsontext.loads(DEEP)
    with pytest.raises(json.JSONDecodeError, match="nested more deeply"):
        jsontext.loads(b'{"a":' * 50_000)
    assert jsontext.loads("[[[1]]]") == [[[1]]]
    assert doctest.testmod(jsontext).failed == 0


def test_a_deep_hwconfig_file_names_the_file(tmp_path):
    path = tmp_path / "cfg.json"
    path.write_text(DEEP)
    with pytest.raises(ValueError, match=rf"{path}: not valid JSON: nested more deeply"):
        HWConfig.load(path)


def test_bytes_that_are_not_utf8_are_a_decode_error():
    # HWConfig.from_json(b"\xff") was a UnicodeDecodeError from inside json
    with pytest.raises(json.JSONDecodeError, match="byte 1 is not UTF-8 text"):
        jsontext.loads(b"{\xff}")
    with pytest.raises(ValueError, match="byte 0 is not UTF-8 text") as info:
        HWConfig.from_json(b"\xff")
    assert not isinstance(info.value, UnicodeDecodeError)


def test_a_deep_tuning_log_line_is_skipped_naming_file_and_line(tmp_path):
    path = tmp_path / "tune.jsonl"
    path.write_text("\n" + DEEP + "\n")
    with pytest.raises(ValueError, match=rf"not a tuning log.*{path}:2: skipped, not JSON "
                       r"\(nested more deeply"):  # fmt: skip
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LogWarning)
            load_records(path)


def test_a_deep_dse_space_file_names_the_file(tmp_path):
    path = tmp_path / "space.json"
    path.write_text(DEEP)
    with pytest.raises(SpaceFileError, match=rf"{path}: not valid JSON: nested more deeply"):
        HwSpace.from_json(path)


def test_deep_rpc_metadata_is_a_payload_error():
    buf = io.BytesIO()
    np.savez(buf, __meta__=np.frombuffer(DEEP.encode(), np.uint8))
    with pytest.raises(PayloadError, match="metadata is not JSON: nested more deeply"):
        unpack(buf.getvalue())


def test_a_deep_gpu_payload_is_a_gpu_error():
    with pytest.raises(GPUError, match="kernel 'k'.*damaged: nested more deeply"):
        parse_payload(DEEP.encode(), "k")
