"""Device module (torch.npu), serialization and statistics of echo_npu."""

from __future__ import annotations

import gc
import io

import torch


def test_device_module(npu):
    assert torch.npu.is_available() and torch.npu.device_count() == 2
    assert torch.npu.current_device() == 0
    with torch.npu.device(1):
        assert torch.npu.current_device() == 1
        assert torch.ones(1, device="npu").device == torch.device("npu", 1)
    assert torch.npu.current_device() == 0
    torch.npu.synchronize()
    torch.npu.manual_seed(123)
    assert torch.npu.initial_seed() == 123
    state = torch.npu.get_rng_state()
    torch.npu.set_rng_state(state)
    assert torch.equal(torch.npu.get_rng_state(), state)
    x = torch.ones(256, device="npu")
    assert torch.npu.memory_allocated() >= x.nbytes
    assert torch.npu.max_memory_allocated() >= torch.npu.memory_allocated()
    stats = torch.npu.memory_stats()
    assert stats["allocated_bytes.all.current"] == torch.npu.memory_allocated()
    assert stats["allocated_bytes.all.peak"] == torch.npu.max_memory_allocated()


def test_save_load_round_trip(npu):
    base = torch.arange(24.0).reshape(4, 6).to("npu")
    obj = {"base": base, "view": base[1:, ::2], "t": base.t(), "i": torch.arange(5).to("npu")}
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    back = torch.load(buf)
    for k, v in obj.items():
        assert back[k].device.type == "npu" and torch.equal(back[k].cpu(), v.cpu()), k
        assert back[k].stride() == v.stride()
    assert back["view"].untyped_storage().data_ptr() == back["base"].untyped_storage().data_ptr()
    buf.seek(0)
    cpu = torch.load(buf, map_location="cpu")
    assert cpu["view"].device.type == "cpu" and torch.equal(cpu["view"], obj["view"].cpu())


def test_statistics_return_to_start(npu):
    gc.collect()
    start = npu.memory_stats()
    xs = [torch.ones(100, device="npu") + i for i in range(5)]
    mid = npu.memory_stats()
    assert mid["live_blocks"] >= start["live_blocks"] + 5
    assert mid["live_bytes"] >= start["live_bytes"] + 5 * 400
    assert mid["total_blocks"] > start["total_blocks"]
    blocks = npu.live_blocks()
    assert all({"ptr", "size", "op", "serial"} <= set(b) for b in blocks)
    serials = [b["serial"] for b in sorted(blocks, key=lambda b: b["serial"])]
    assert serials == sorted(set(serials))
    del xs
    gc.collect()
    end = npu.memory_stats()
    assert end["live_blocks"] == start["live_blocks"]
    assert end["live_bytes"] == start["live_bytes"]
    assert end["peak_bytes"] >= mid["live_bytes"]


def test_device_module_like_real_backends(npu):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "Set seed for 'npu' does not take effect"
        torch.manual_seed(7)
    assert torch.npu.initial_seed() == 7
    torch.npu.seed_all()
    assert torch.npu.is_initialized() and not torch.npu._is_in_bad_fork()
    torch.npu._lazy_init()
    assert torch.npu.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]
    assert torch.npu.is_bf16_supported()
    states = torch.npu.get_rng_state_all()
    torch.npu.set_rng_state_all(states)
    s = torch.npu.current_stream(1)
    assert isinstance(s, torch.npu.Stream) and s.device == torch.device("npu", 1)
    a, b = torch.ones(2, 3, device="npu"), torch.ones(3, 2, device="npu")
    with torch.autocast(device_type="npu", dtype=torch.bfloat16):
        assert (a @ b).dtype == torch.bfloat16  # matrix products run in the autocast dtype
        assert (a + 1).dtype == torch.float32  # everything else falls through
    torch.npu.empty_cache()


def test_memory_statistics_standard_apis(npu):
    gc.collect()
    torch.npu.reset_peak_memory_stats()
    base = torch.npu.memory_allocated()
    assert torch.npu.max_memory_allocated() == base
    x = torch.empty(1000, device="npu")
    assert torch.npu.memory_allocated() == base + 4000 == torch.npu.memory_reserved()
    del x
    gc.collect()
    assert torch.npu.memory_allocated() == base
    assert torch.npu.max_memory_allocated() == base + 4000
    with torch.npu.device(1):
        y = torch.empty(10, device="npu")
        assert torch.npu.memory_allocated(1) >= 40 and torch.npu.memory_allocated(0) == base
    del y
    if hasattr(getattr(torch, "accelerator", None), "memory_allocated"):  # torch >= 2.9
        assert torch.accelerator.memory_allocated() == torch.npu.memory_allocated()
        stats = torch.accelerator.memory_stats()
        assert stats["allocated_bytes.all.peak"] == torch.npu.max_memory_allocated()
        torch.accelerator.reset_peak_memory_stats()
        assert torch.accelerator.max_memory_allocated() == torch.accelerator.memory_allocated()
        torch.accelerator.empty_cache()


def test_the_suites_accelerator_counter_reads_what_torch_accelerator_reports(npu):
    """engine/memory.py reads torch.accelerator.memory_allocated()'s figure from the statistics
    that function flattens (it costs about 150 us a call): both agree as blocks come and go."""
    from conformance.engine.memory import _accelerator_allocated

    if not hasattr(torch, "accelerator") or not hasattr(torch.accelerator, "memory_allocated"):
        return
    counter = _accelerator_allocated(torch.accelerator, 1)
    assert counter() == torch.accelerator.memory_allocated(1)
    with torch.npu.device(1):
        x = torch.ones(4096, device="npu")
        assert counter() == torch.accelerator.memory_allocated(1) >= x.nbytes
        del x
        gc.collect()
        assert counter() == torch.accelerator.memory_allocated(1)
