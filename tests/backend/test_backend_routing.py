"""Fallback routing switch, native op registry and environment-variable validation."""

from __future__ import annotations

import pytest
import torch

REQUIRED = """empty.memory_format empty_strided as_strided view resize_ _copy_from
_copy_from_and_resize fill_.Scalar zero_ _local_scalar_dense add.Tensor add_.Tensor add.out
sub.Tensor sub.out mul.Tensor mul_.Tensor mul.out div.Tensor div.out neg neg.out abs abs.out exp
exp.out relu eq.Tensor eq.Scalar ne.Scalar lt.Tensor gt.Scalar masked_fill_.Scalar
masked_fill_.Tensor where.self sum.dim_IntList mean.dim amax all any tril triu cat index_select
_softmax sqrt sqrt_ sqrt.out cumsum cumsum_ cumsum.out""".split()


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


# cpu_fallback puts its outputs on the device of the FIRST tensor argument: a wrapped Python
# number or a 0-dim CPU tensor in front (`1.0 - x` is sub.Tensor(tensor(1.0), x)) would bring
# the result back on CPU. echo_npu's fallback wrapper moves it to the device, as CPU eager does.
SCALAR_FIRST = {
    "sub.Tensor": lambda x: 1 - x,
    "add.Tensor": lambda x: torch.add(torch.tensor(2), x, alpha=3),
    "mul.Tensor": lambda x: torch.tensor(3) * x,
    "div.Tensor": lambda x: torch.div(torch.tensor(6), x),
    "rsub": lambda x: torch.rsub(x, 1),
    "rsub.Tensor": lambda x: torch.rsub(torch.tensor(5), x),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64], ids=str)
@pytest.mark.parametrize("name", sorted(SCALAR_FIRST))
def test_fallback_results_on_the_device_with_a_cpu_first_operand(npu, routes, name, dtype):
    fn = SCALAR_FIRST[name]
    x = torch.arange(1, 7, dtype=dtype).reshape(2, 3)
    expected = fn(x)
    routes(["sub.Tensor", "add.Tensor", "mul.Tensor", "div.Tensor"])
    got = fn(x.to("npu"))
    assert got.device.type == "npu" and got.dtype == expected.dtype, (got.device, got.dtype)
    assert torch.equal(got.cpu(), expected)
    assert npu.fallback_counts(), "not served by the fallback"


def test_fallback_out_and_inplace_results_stay_the_argument(npu, routes):
    x = torch.arange(6.0).reshape(2, 3)
    routes(["sub.out", "sub_.Tensor"])
    dx, out = x.to("npu"), torch.empty(0, device="npu")
    assert torch.sub(torch.tensor(1.0), dx, out=out) is out
    assert out.device.type == "npu" and torch.equal(out.cpu(), 1.0 - x)
    y = dx.clone()
    assert y.sub_(torch.tensor(1.0)) is y and torch.equal(y.cpu(), x - 1)
    counts = npu.fallback_counts()
    assert counts.get("sub.out") == 1 and counts.get("sub_.Tensor") == 1


def test_fallback_with_only_cpu_tensors_keeps_cpu_results(npu, routes):
    a, b = torch.tensor(1.5), torch.arange(3.0)
    routes(["sub.Tensor"])
    keys = torch._C.DispatchKeySet(torch._C.DispatchKey.PrivateUse1)
    got = torch.ops.aten.sub.Tensor.redispatch(keys, a, b)  # the device's kernel, CPU tensors
    assert got.device.type == "cpu" and torch.equal(got, a - b)
    assert npu.fallback_counts().get("sub.Tensor") == 1


# native_batch_norm's schema declares running_mean/running_var `Tensor?` (not written), so
# cpu_fallback never copies CPU's in-place update of them back: the wrapper does.
def _bn(x, mean, var, training, out=False):
    args = (x, None, None, mean, var, training, 0.1, 1e-5)
    if not out:
        return torch.native_batch_norm(*args)
    o = [torch.empty(0, device=x.device) for _ in range(3)]
    return torch.ops.aten.native_batch_norm.out(*args, out=o[0], save_mean=o[1], save_invstd=o[2])


@pytest.mark.parametrize("out", [False, True], ids=["functional", "out"])
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_fallback_native_batch_norm_updates_running_stats(npu, out, training):
    x = torch.randn(4, 3, 5, 5, generator=torch.Generator().manual_seed(0)) * 2 + 1
    mean, var = torch.zeros(3), torch.ones(3)
    dx, dmean, dvar = x.to("npu"), mean.to("npu"), var.to("npu")
    npu.reset_fallback_counts()
    expected = _bn(x, mean, var, training, out)
    got = _bn(dx, dmean, dvar, training, out)
    name = "native_batch_norm.out" if out else "native_batch_norm"
    assert npu.fallback_counts().get(name) == 1, npu.fallback_counts()
    torch.testing.assert_close(dmean.cpu(), mean)  # updated (train) or untouched (eval), as CPU
    torch.testing.assert_close(dvar.cpu(), var)
    assert training == (not torch.equal(mean, torch.zeros(3)))
    for g, e in zip(got, expected, strict=True):
        assert g.device.type == "npu"
        torch.testing.assert_close(g.cpu(), e)


def test_fallback_batch_norm_module_training_step(npu):
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm2d(3)
    dbn = torch.nn.BatchNorm2d(3).to("npu")
    x = torch.randn(4, 3, 5, 5)
    for _ in range(2):
        expected, got = bn(x), dbn(x.to("npu"))
    torch.testing.assert_close(got.cpu(), expected)
    for name, buf in bn.named_buffers():
        torch.testing.assert_close(dict(dbn.named_buffers())[name].cpu(), buf, msg=name)
