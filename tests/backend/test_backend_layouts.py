"""Round trips of every layout, strided npu copies and allocation statistics, per allocator mode."""

from __future__ import annotations

import pytest

MODES = ["malloc", "aligned", "guard", "page"]

SNIPPET = r"""
import gc, torch, echo_npu
assert echo_npu.allocator_mode() == MODE, echo_npu.allocator_mode()
D = echo_npu.DEVICE_NAME
start = echo_npu.memory_stats()["live_blocks"]
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int16,
          torch.int32, torch.int64, torch.uint8, torch.bool]

def make(shape, dt):
    t = torch.arange(1, 1 + torch.Size(shape).numel()).reshape(shape) % 97
    return (t % 2 == 1) if dt == torch.bool else t.to(dt)

def layouts(dt):
    base = make((4, 6, 5), dt)
    yield "contiguous", base
    yield "transposed", base.transpose(0, 2)
    yield "sliced_step", base[:, ::2, 1::3]
    yield "offset", base[1:, 2:]
    yield "flat_offset", base.view(-1)[7:19]
    yield "expanded", make((1, 5), dt).expand(4, 5)
    yield "channels_last", make((2, 3, 4, 5), dt).contiguous(memory_format=torch.channels_last)
    yield "zero_size", make((0, 3), dt)
    yield "zero_dim", make((), dt)

checked = 0
for dt in DTYPES:
    for name, t in layouts(dt):
        d = t.to(D)
        back = d.cpu()
        assert torch.equal(back, t), (name, dt)
        if name not in ('expanded', 'sliced_step', 'offset', 'flat_offset'):
            assert d.stride() == t.stride() and back.stride() == t.stride(), (name, dt)
        checked += 1
    # views taken on the device read back exactly (offset + strides in D2H)
    base = make((4, 6, 5), dt)
    db = base.to(D)
    for view in (lambda x: x.transpose(0, 2), lambda x: x[:, ::2, 1::3], lambda x: x[1:, 2:],
                 lambda x: x.view(-1)[7:19], lambda x: x[:, :1].expand(4, 3, 5)):
        assert torch.equal(view(db).cpu(), view(base)), dt
    # H2D into a strided device view, and npu -> npu between strided views
    src = make((3, 3), dt)
    cb, dbb = base.clone(), base.to(D)
    cb[1:, 1::2, :].transpose(0, 1)[:3, :, 0].copy_(src)
    dbb[1:, 1::2, :].transpose(0, 1)[:3, :, 0].copy_(src)
    assert torch.equal(dbb.cpu(), cb), dt
    cb[0].copy_(cb[2].t().reshape(6, 5))
    dbb[0].copy_(dbb[2].t().reshape(6, 5))
    cb[::2].copy_(cb[1::2])
    dbb[::2].copy_(dbb[1::2])
    assert torch.equal(dbb.cpu(), cb), dt
    # overlapping views: CPU refuses partial overlap, the device must refuse the same way
    x, dx = make((10,), dt), make((10,), dt).to(D)
    err = []
    for y in (x, dx):
        try:
            y[1:].copy_(y[:-1])
            err.append(None)
        except RuntimeError as e:
            err.append(str(e).split(".")[0])
    assert err[0] == err[1], err
    # dtype conversion during copies
    if dt not in (torch.bool,):
        f = make((3, 4), dt)
        assert torch.equal(f.to(D).to(torch.float64).cpu(), f.to(torch.float64))
        assert torch.equal(f.double().to(D).to(dt).cpu(), f)

del t, d, back, base, db, src, cb, dbb, x, dx, y
gc.collect()
stats = echo_npu.memory_stats()
assert stats["live_blocks"] == start, (stats, start, echo_npu.live_blocks())
assert stats["total_blocks"] > 100 and stats["peak_bytes"] > 0
if MODE in ("guard", "page"):
    assert echo_npu.check_memory() == [], echo_npu.check_memory()
print("OK", checked)
"""


@pytest.mark.parametrize("mode", MODES)
def test_layout_round_trips(run_py, mode):
    r = run_py(f"MODE = {mode!r}\n" + SNIPPET, ECHO_NPU_ALLOCATOR=mode)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.startswith("OK 90"), r.stdout


OOB = r"""
import ctypes, torch, echo_npu
x = torch.empty(10, dtype=torch.float32, device=echo_npu.DEVICE_NAME)   # 40 bytes
keep = torch.ones(3, device=echo_npu.DEVICE_NAME)
assert echo_npu.check_memory() == []
ctypes.memset(x.data_ptr() + x.nbytes, 0x11, 4)          # 4 bytes past the storage
y = keep + 1                                               # per-op check runs after add.Tensor
errs = echo_npu.check_memory()
assert len(errs) == 1, errs
e = errs[0]
assert (e["ptr"], e["size"], e["side"], e["offset"]) == (x.data_ptr(), 40, "after", 0), e
assert e["op"] == "empty.memory_format", e
assert e["first_seen_after"] == "add.Tensor", e
echo_npu.clear_memory_errors()
ctypes.memset(x.data_ptr() + x.nbytes, 0xCD, 4)  # restore the pattern
"""


@pytest.mark.parametrize("mode", ["guard", "page"])
def test_out_of_bounds_write_is_reported(run_py, mode):
    code = OOB
    if mode == "guard":
        code += r"""
ctypes.memset(x.data_ptr() - 1, 0x22, 1)                   # 1 byte before the block
errs = echo_npu.check_memory()
assert [(e["side"], e["offset"], e["size"]) for e in errs] == [("before", 63, 40)], errs
"""
    r = run_py(code + "print('OK')", ECHO_NPU_ALLOCATOR=mode)
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr[-3000:]


def test_page_mode_guard_page_faults(run_py):
    code = r"""
import ctypes, torch, echo_npu
x = torch.empty(16, dtype=torch.float32, device="npu")    # 64 bytes, ends at the guard page
ctypes.memset(x.data_ptr() + x.nbytes, 0x11, 4)
"""
    r = run_py(code, ECHO_NPU_ALLOCATOR="page")
    assert r.returncode == -11, (r.returncode, r.stderr[-2000:])


def test_malloc_mode_reports_nothing(run_py):
    r = run_py(
        "import torch, echo_npu\nx = torch.ones(3, device='npu')\n"
        "assert echo_npu.check_memory() == []\nprint(echo_npu.allocator_mode())"
    )
    assert r.returncode == 0 and r.stdout.strip() == "malloc", r.stderr
