"""The windows' mask and timesteps: written by the CPU sample handler, derived
in XLA (gearjax/_window_steps.py) in GPU programs; both the same, the CPU
program holds no kernel after the table call, and a program that reads
neither gets neither."""

from __future__ import annotations

import re

import jax
import numpy as np
import pytest

import gearjax as gx
from gearjax import _cuda, _ffi, _gearjax
from gearjax._window_steps import window_steps

MAX_LENGTH = 12


@pytest.fixture(scope="module")
def table():
    table = gx.Table({"x": gx.Column((2,), "float32")}, capacity=16, max_length=MAX_LENGTH)
    for length in (1, 3, 5, 8, 12, 12, 7, 2):
        table.insert({"x": np.arange(2 * length, dtype=np.float32).reshape(length, 2)})
    yield table
    table.close()


# Both pads and cuts (cut="end" pads on the left, cut="full" never pads),
# windows narrower and wider than the SSE2 loop's four steps, whole trajectories.
CASES = [dict(window=w, pad=p, cut="start") for w in (1, 4, 9) for p in ("left", "right")] + [
    dict(window=4, pad="left", cut="end"), dict(window=9, pad="left", cut="end"),
    dict(window=4, pad=None, cut="full"),
    dict(window=None, pad="left", cut="start"), dict(window=None, pad="right", cut="start")]


@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("numpy", [False, True], ids=["program", "numpy"])
def test_the_handler_writes_what_xla_derives(table, case, numpy):
    # Eagerly, JAX arrays come from the table's compiled program (the CPU
    # handler); numpy=True from the native eager sample.
    batch = table.sample(jax.random.key(5), 64, case["window"], pad=case["pad"],
                         cut=case["cut"], numpy=numpy)
    width = case["window"] or MAX_LENGTH
    valid = np.asarray(batch.mask).sum(axis=1).astype(np.int32)
    assert valid.min() >= 1
    assert (valid < width).any() == (width > 1 and case["cut"] != "full")  # padded rows
    mask, timestep = window_steps(jax.numpy.asarray(batch.start), jax.numpy.asarray(valid),
                                  width, case["pad"] == "left")
    np.testing.assert_array_equal(np.asarray(batch.mask), np.asarray(mask))
    np.testing.assert_array_equal(np.asarray(batch.timestep), np.asarray(timestep))


def test_a_cpu_program_runs_no_kernel_after_the_table_call(table):
    # XLA:CPU runs a program of more than one kernel through its thread pool
    # (gearjax/_window_steps.py): the sample's program is the state's copy
    # and the table call, nothing else.
    def sample(state, key):
        return table.sample(state, key, 8, 4, pad="left")

    text = jax.jit(sample).lower(table.state(), jax.random.key(0)).compile().as_text()
    entry = text[text.index("ENTRY"):]
    assert "custom_call_target=\"gearjax_sample\"" in entry
    assert "fusion" not in entry and "select" not in entry


def _custom_call_results(text: str) -> list[str]:
    line = next(line for line in text.splitlines() if "@gearjax_sample" in line)
    return re.findall(r"tensor<[^>]*>", line.split("->")[-1])


def _lowered_for_cuda(table, sample) -> str:
    """`sample(state, key)` jitted and lowered with the CUDA lowering rule (no
    GPU needed to lower), as text; a build without CUDA handlers gets its
    refusal back afterwards."""
    _ffi.register_sample_lowering_for_cuda()
    try:
        return jax.jit(sample).trace(table.state(), jax.random.key(0)).lower(
            lowering_platforms=("cuda",)).as_text()
    finally:
        if not _gearjax.cuda_built:
            _cuda.refuse_gpu_programs()


def test_a_gpu_program_derives_them_in_xla(table):
    # The CUDA lowering rule: its table call returns no mask or timestep and
    # the program derives them.
    def sample(state, key):
        state, batch = table.sample(state, key, 8, 4, pad="left")
        return state, batch.mask, batch.timestep

    gpu = _custom_call_results(_lowered_for_cuda(table, sample))
    cpu = _custom_call_results(jax.jit(sample).lower(table.state(), jax.random.key(0)).as_text())
    # state, keys, start, probability, table_size, valid, (mask, timestep,) x
    assert len(cpu) == 9 and cpu[6:8] == ["tensor<8x4xi1>", "tensor<8x4xi32>"]
    assert gpu == cpu[:6] + cpu[8:]


def _columns_only(table):
    def sample(state, key):
        state, batch = table.sample(state, key, 8, 4, pad="left")
        return state, batch["x"], batch.start
    return sample


def test_a_program_reading_neither_gets_neither(table):
    # sample_p's DCE rule drops both from the call, so the handler writes
    # neither; the rows drawn and gathered are the same.
    def whole(state, key):
        return table.sample(state, key, 8, 4, pad="left")

    def mask_only(state, key):
        state, batch = table.sample(state, key, 8, 4, pad="left")
        return state, batch.mask.sum()

    key = jax.random.key(3)
    results = {f.__name__: _custom_call_results(jax.jit(f).lower(table.state(), key).as_text())
               for f in (whole, mask_only, _columns_only(table))}
    assert len(results["whole"]) == 9 and results["mask_only"] == results["whole"]
    assert results["sample"] == results["whole"][:6] + results["whole"][8:]
    _, x, start = jax.jit(_columns_only(table))(table.state(), key)
    _, batch = jax.jit(whole)(table.state(), key)
    np.testing.assert_array_equal(np.asarray(x), np.asarray(batch["x"]))
    np.testing.assert_array_equal(np.asarray(start), np.asarray(batch.start))


def test_a_scan_body_reading_neither_gets_neither(table):
    def scanned(read_steps):
        def run(state, key):
            def body(state, k):
                state, batch = table.sample(state, k, 8, 4, pad="left")
                total = batch["x"].sum()
                if read_steps:  # reads timestep, adds nothing to the total
                    total = total + 0 * batch.timestep.sum()
                return state, total
            return jax.lax.scan(body, state, jax.random.split(key, 3))
        return jax.jit(run)

    key = jax.random.key(4)
    lean, full = (_custom_call_results(scanned(r).lower(table.state(), key).as_text())
                  for r in (False, True))
    assert len(full) == 9 and lean == full[:6] + full[8:]
    np.testing.assert_array_equal(np.asarray(scanned(False)(table.state(), key)[1]),
                                  np.asarray(scanned(True)(table.state(), key)[1]))


def test_a_gpu_program_reading_neither_derives_neither(table):
    text = _lowered_for_cuda(table, _columns_only(table))
    assert len(_custom_call_results(text)) == 7
    assert "iota" not in text  # window_steps' positions: nothing derived
