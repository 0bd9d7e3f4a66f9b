"""Fallback routing switch, native op registry and environment-variable validation."""

from __future__ import annotations

import pytest
import torch

REQUIRED = """empty.memory_format empty_strided as_strided view resize_ _copy_from
_copy_from_and_resize fill_.Scalar zero_ _local_scalar_dense add.Tensor add_.Tensor add.out
sub.Tensor sub.out mul.Tensor mul_.Tensor mul.out div.Tensor div.out neg neg.out abs abs.out exp
exp.out relu eq.Tensor eq.Scalar ne.Scalar lt.Tensor gt.Scalar masked_fill_.Scalar
masked_fill_.Tensor where.self sum.dim_IntList mean.dim amax all any tril triu cat index_select
_softmax""".split()


def test_native_ops_registered(npu):
    ops = set(npu.native_ops())
    assert set(REQUIRED) <= ops, set(REQUIRED) - ops
    for name in REQUIRED:
        schema = "aten::" + name if "." in name else "aten::" + name
        assert torch._C._dispatch_has_kernel_for_dispatch_key(schema, "PrivateUse1"), name


@pytest.fixture
def routes(npu):
    npu.reset_fallback_counts()
    yield npu.set_fallback_routes
    npu.set_fallback_routes([])


def test_routed_op_goes_through_fallback(npu, routes):
    a, b = torch.randn(3, 4), torch.randn(4)
    da, db = a.to("npu"), b.to("npu")
    native = (da + db).cpu()
    assert "add.Tensor" not in npu.fallback_counts()
    routes(["add.Tensor", "masked_fill_.Scalar"])
    assert npu.get_fallback_routes() == ["add.Tensor", "masked_fill_.Scalar"]
    routed = (da + db).cpu()
    torch.testing.assert_close(routed, a + b)
    torch.testing.assert_close(native, routed)
    m = torch.tensor([True, False, True])
    x = torch.zeros(3, 4)
    dx = x.to("npu")
    x.t().masked_fill_(m, 2.0)
    dx.t().masked_fill_(m.to("npu"), 2.0)
    assert torch.equal(dx.cpu(), x)
    counts = npu.fallback_counts()
    assert counts.get("add.Tensor") == 1 and counts.get("masked_fill_.Scalar") == 1, counts
    routes([])
    (da + db).cpu()
    assert npu.fallback_counts()["add.Tensor"] == 1


def test_bad_routes_rejected(npu, routes):
    with pytest.raises(ValueError, match="cannot be routed"):
        routes(["_copy_from"])
    with pytest.raises(ValueError, match="unknown native op"):
        routes(["not_an_op"])
    assert npu.get_fallback_routes() == []


def test_routes_from_env(run_py):
    code = (
        "import torch, echo_npu\nx = torch.ones(3, device='npu')\n(x.abs() + x).cpu()\n"
        "print(echo_npu.get_fallback_routes(), echo_npu.fallback_counts().get('abs'))"
    )
    r = run_py(code, ECHO_NPU_FALLBACK_OPS="abs")
    assert r.stdout.strip() == "['abs'] 1", (r.stdout, r.stderr[-2000:])


@pytest.mark.parametrize(
    "var,value,needle",
    [
        ("ECHO_NPU_ALLOCATOR", "bogus", "valid values: malloc, aligned, guard, page"),
        ("ECHO_NPU_DEVICE_NAME", "gpu", "valid values: npu, privateuseone"),
        ("ECHO_NPU_FAULTS", "leak,bogus", "valid: masked_fill_overflow"),
        ("ECHO_NPU_FALLBACK_OPS", "view", "cannot be routed"),
        ("ECHO_NPU_REFUSE_FORK", "yes", "valid values: 0, 1"),
        ("ECHO_NPU_NO_FALLBACK", "true", "valid values: 0, 1"),
        ("ECHO_NPU_NO_HOOKS", "2", "valid values: 0, 1"),
    ],
)
def test_bad_env_value_one_line_error(run_py, var, value, needle):
    r = run_py("import echo_npu", **{var: value})
    assert r.returncode == 1
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("ValueError: ") and needle in last, r.stderr[-2000:]


def test_privateuseone_name_kept(run_py):
    code = (
        "import torch, echo_npu\nx = torch.ones(2, device='privateuseone')\n"
        "print(x.device, torch._C._get_privateuse1_backend_name(), x.cpu().tolist())"
    )
    r = run_py(code, ECHO_NPU_DEVICE_NAME="privateuseone")
    assert r.stdout.strip() == "privateuseone:0 privateuseone [1.0, 1.0]", r.stderr[-2000:]
