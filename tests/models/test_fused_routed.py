"""The fused routed-attention kernel (``sr.models.attention.native``) against today's tiered path.

fp32 within 1e-5 and bf16 within its rounding, on odd region grids and sizes, k = 0 regions, one tier
and many, batch > 1, head sizes 16 (the shipped models') and others, strided q/k/v rows, for every ISA
variant this CPU runs (so an AVX-512 machine also checks the AVX2 code that AVX2-only CPUs run);
then the whole network, the build cache and the fallbacks.

The kernel tests share one build, made once per test session in a temporary cache (a build takes a
few seconds; a tmp folder keeps a user's ~/.cache/sr out of the tests, and the build, lock and cache
code run end to end each time). Other test modules that run models at inference use the kernel
through ``native.kernel()`` and its normal cache.
"""

from __future__ import annotations

import math
import subprocess

import pytest
import torch

from sr.models.attention import native
from sr.models.attention.routing import region_attention, region_token_ids, tiered_attention

needs_compiler = pytest.mark.skipif(native.compiler() is None, reason="no C++ compiler here")


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> native.Kernel:
    root = tmp_path_factory.mktemp("sr-cache") / "kernels"
    path, built_at = native.build(root)
    assert path is not None, built_at  # built_at holds the reason when the build failed
    return native.load(path, built_at)


@pytest.fixture
def fresh_kernel_state():
    """native.kernel() looks again inside the test, and the session's state comes back after it."""
    native.kernel.cache_clear()
    yield
    native.kernel.cache_clear()


def problem(b: int, hr: int, wr: int, p: int, c: int, heads: int, k_max: int, tiers: str, seed: int = 0,
            dtype: torch.dtype = torch.float32):
    """Token rows q, k, v (strided views of one (T, 3C) map, as the model's fused q/k/v conv gives),
    region tokens, routes and budgets on a (hr, wr) grid of p x p regions; ``tiers``: 'one' (every
    region k_max), 'many' (0..k_max, k = 0 included) or 'zero' (all 0)."""
    g = torch.Generator().manual_seed(seed)
    h, w = hr * p, wr * p
    n = hr * wr
    qkv = torch.randn(b * h * w, 3 * c, generator=g).to(dtype)
    rows = qkv[:, :c], qkv[:, c : 2 * c], qkv[:, 2 * c :]
    tokens = region_token_ids(b, h, w, p, torch.device("cpu"))  # (B*N, P)
    idx = torch.stack([torch.randperm(n, generator=g)[:k_max] for _ in range(b * n)]).view(b, n, k_max)
    if tiers == "one":
        k_int = torch.full((b, n), k_max)
    elif tiers == "many":
        k_int = torch.randint(0, k_max + 1, (b, n), generator=g)
        k_int.view(-1)[:2] = torch.tensor([0, k_max])  # both ends present
    else:
        k_int = torch.zeros(b, n, dtype=torch.long)
    return (*rows, tokens, idx, k_int, heads)


CASES = {  # b, region grid, p, C, heads, k_max, tiers
    "d16-many": (2, (3, 5), 4, 48, 3, 8, "many"),
    "d16-one": (1, (4, 4), 4, 48, 3, 4, "one"),
    "d20-odd-grid": (2, (5, 3), 4, 40, 2, 6, "many"),
    "d8-region2": (1, (7, 5), 2, 16, 2, 5, "many"),  # 4 tokens per region: lanes padded
    "d12-region5": (2, (3, 3), 5, 36, 3, 4, "many"),  # 25 tokens per region: two chunks on AVX-512
    "k1-one-tier": (3, (2, 3), 4, 48, 3, 1, "one"),
    "all-zero": (1, (2, 2), 4, 48, 3, 2, "zero"),
}

def bf16_step(t: torch.Tensor) -> torch.Tensor:
    """The spacing of bf16 values (8 significant bits) at the magnitude of each element of ``t``."""
    return 2.0 ** (torch.floor(torch.log2(t.abs().clamp_min(1e-30))) - 7)


def variants(kernel: native.Kernel) -> list[int]:
    """Every ISA variant this CPU runs (the best and all below it)."""
    return list(range(kernel.isa + 1))


@needs_compiler
@pytest.mark.parametrize("case", CASES)
def test_fp32_equals_the_tiered_path_within_1e5(built, case):
    b, (hr, wr), p, c, heads, k_max, tiers = CASES[case]
    args = problem(b, hr, wr, p, c, heads, k_max, tiers)
    want = tiered_attention(*args)
    for isa in variants(built):
        got = native.call(built, *args, isa=isa)
        assert got.dtype == torch.float32 and got.shape == want.shape
        assert (got - want).abs().max().item() <= 1e-5, native.ISA_NAMES[isa]
    if tiers == "zero":
        assert not got.any()
    k_flat = args[-2].reshape(-1)
    skipped = args[3][k_flat == 0].flatten()  # the rows of k = 0 regions are exactly zero
    assert not got[skipped].any()


@needs_compiler
@pytest.mark.parametrize("case", ["d16-many", "d20-odd-grid", "d12-region5"])
def test_bf16_is_within_its_rounding_of_the_fp32_maths(built, case):
    """bf16 in and out, fp32 inside: within half a bf16 step of the fp32 result on the same (bf16)
    inputs, plus fp32 noise; and never farther from it than the tiered path's bf16 SDPA."""
    b, (hr, wr), p, c, heads, k_max, tiers = CASES[case]
    args = problem(b, hr, wr, p, c, heads, k_max, tiers, dtype=torch.bfloat16)
    exact = tiered_attention(*(t.float() for t in args[:3]), *args[3:])  # fp32 maths on the bf16 inputs
    tiered = tiered_attention(*args).float()
    for isa in variants(built):
        got = native.call(built, *args, isa=isa)
        assert got.dtype == torch.bfloat16
        err = (got.float() - exact).abs()
        assert (err <= exact.abs() * 2**-8 + 1e-6).all(), native.ISA_NAMES[isa]  # bf16: 8 mantissa bits
        assert err.max() <= (tiered - exact).abs().max()


@needs_compiler
def test_bad_arguments_are_errors_not_stray_reads(built):
    q, k, v, tokens, idx, k_int, heads = problem(1, 2, 2, 4, 48, 3, 2, "many")
    with pytest.raises(RuntimeError, match="out of range"):
        native.call(built, q, k, v, tokens, idx + 4, k_int, heads)
    with pytest.raises(RuntimeError, match="out of range"):
        native.call(built, q, k, v, tokens, idx, k_int + 3, heads)
    with pytest.raises(RuntimeError, match="share fp32 or bf16"):
        native.call(built, q, k.double(), v, tokens, idx, k_int, heads)
    with pytest.raises(RuntimeError, match="divisible by heads"):
        native.call(built, q, k, v, tokens, idx, k_int, 5)


@needs_compiler
@pytest.mark.parametrize("sizes", [(64, 64, 128, 128), (19, 23, 37, 45), (1, 3, 2, 5)],
                         ids=["even", "odd", "tiny"])
@torch.inference_mode()
def test_upsample_add_equals_interpolate_then_add(built, sizes, monkeypatch):
    """The stride-2 block's end, x + bilinear upsample (align_corners=False, ceil-pooled odd sizes
    included): fp32 within 1e-5 of F.interpolate + add; bf16 within half a bf16 step of the fp32
    maths on the same inputs and one step of today's twice-rounded sum."""
    monkeypatch.setattr(native, "kernel", lambda: built)
    hs, ws, h, w = sizes
    g = torch.Generator().manual_seed(1)
    cl = torch.channels_last
    for dtype in (torch.float32, torch.bfloat16):
        small = torch.randn(2, 48, hs, ws, generator=g).to(dtype).contiguous(memory_format=cl)
        x = torch.randn(2, 48, h, w, generator=g).to(dtype).contiguous(memory_format=cl)
        up = torch.nn.functional.interpolate(small.float(), size=(h, w), mode="bilinear", align_corners=False)
        exact = x.float() + up
        today = torch.nn.functional.interpolate(small, size=(h, w), mode="bilinear", align_corners=False) + x
        assert native.upsample_add_usable(small, x)
        for isa in variants(built):
            got = native.upsample_add(small, x, isa=isa)
            assert got.dtype == dtype and got.shape == x.shape and got.is_contiguous(memory_format=cl)
            if dtype == torch.float32:
                assert (got - exact).abs().max().item() <= 1e-5, native.ISA_NAMES[isa]
            else:
                fp32_noise = 1e-6 * (x.float().abs() + up.abs())
                err = (got.float() - exact).abs()
                assert (err <= bf16_step(exact) / 2 + fp32_noise).all(), native.ISA_NAMES[isa]
                # today rounds the upsampled map first: up to half a step of the larger of it and the sum
                big = torch.maximum(exact.abs(), up.abs())
                assert ((got.float() - today.float()).abs() <= bf16_step(big) + fp32_noise).all()
    assert not native.upsample_add_usable(small.contiguous(), x)  # NCHW: the eager ops
    with native.tiered_only():
        assert not native.upsample_add_usable(small, x)


def test_the_network_takes_the_kernel_at_inference_and_matches_the_tiered_path():
    """asa-base's blocks on an odd-sized input (regions padded at the edges): fp32 within 1e-5 of the
    tiered path, bf16 within 50 dB; the kernel ran, and not under autograd."""
    from sr.cpu import cpu_runs_bf16
    from sr.models.registry import build_model

    kernel = native.kernel()
    if not isinstance(kernel, native.Kernel):
        pytest.skip(kernel.status())
    torch.manual_seed(0)
    net = build_model("asa-base-x2").eval().requires_grad_(False)
    for m in net.modules():  # make the attention's contribution visible
        if hasattr(m, "proj"):
            torch.nn.init.normal_(m.proj.weight, std=0.5)
    calls = []
    original = native.fused_routed_attention

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    x = torch.rand(1, 3, 37, 45)
    for dtype in (torch.float32, *([torch.bfloat16] if cpu_runs_bf16() else [])):
        net = net.to(dtype=dtype, memory_format=torch.channels_last)
        xd = x.to(dtype).contiguous(memory_format=torch.channels_last)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(native, "fused_routed_attention", counted)
            with torch.inference_mode():
                got = net(xd).float()
                with native.tiered_only():
                    want = net(xd).float()
        assert len(calls) == 2 * (1 + (dtype == torch.bfloat16))  # two attention blocks, once per forward
        if dtype == torch.float32:
            assert (got - want).abs().max().item() <= 1e-5
        else:
            mse = (got.clamp(0, 1) - want.clamp(0, 1)).pow(2).mean().item()
            assert mse == 0 or 10 * math.log10(1 / mse) >= 50
    with torch.enable_grad():  # autograd: the tiered path (the kernel has no backward)
        q = torch.randn(64, 16, requires_grad=True)
        assert not native.supported(q)


def test_region_attention_takes_the_tiered_path_where_the_kernel_may_not_run():
    args = problem(1, 2, 3, 4, 16, 2, 3, "many")
    want = tiered_attention(*args)
    with native.tiered_only():
        assert torch.equal(region_attention(*args), want)
    grad_q = args[0].detach().clone().requires_grad_(True)
    assert torch.equal(region_attention(grad_q, *args[1:]), want)  # autograd: tiered, bit for bit


@needs_compiler
def test_a_build_is_cached_and_reused_without_compiling(built, tmp_path, monkeypatch):
    root = tmp_path / "kernels"
    path, date = native.build(root)
    assert path is not None and path.is_file() and (path.parent / "build.json").is_file()
    assert path.parent.name == native.build_key() and "torch" in path.parent.name

    def no_compile(*args, **kwargs):
        raise AssertionError("compiled twice")

    monkeypatch.setattr(native.subprocess, "run", no_compile)
    assert native.build(root) == (path, date)


def test_concurrent_builds_compile_once(tmp_path, monkeypatch):
    """Two builders at once (threads here; processes take the same file lock): one compiles, the other
    waits and reuses its library."""
    import threading

    log = tmp_path / "compiles.txt"
    fake = tmp_path / "fake-cxx"
    fake.write_text("#!/bin/sh\n"
                    "if [ \"$1\" = --version ]; then echo 'fake c++ 1.0'; exit 0; fi\n"
                    f"echo compile >> {log}\n"
                    "while [ \"$1\" != -o ]; do shift; done\n"
                    "sleep 1; echo lib > \"$2\"\n")
    fake.chmod(0o755)
    monkeypatch.setenv("CXX", str(fake))
    root = tmp_path / "kernels"
    results = []
    threads = [threading.Thread(target=lambda: results.append(native.build(root))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 2 and results[0] == results[1] and results[0][0] is not None
    assert log.read_text().splitlines() == ["compile"]


def test_without_a_compiler_the_tiered_path_runs_and_says_why(tmp_path, monkeypatch, fresh_kernel_state):
    monkeypatch.setenv("SR_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(native, "compiler", lambda: None)
    k = native.kernel()
    assert isinstance(k, native.Unavailable)
    assert native.kernel_status() == "fallback: tiered SDPA (no C++ compiler ($CXX, c++ or g++) on PATH)"
    args = problem(1, 2, 2, 4, 16, 2, 2, "many")
    with torch.inference_mode():
        assert torch.equal(region_attention(*args), tiered_attention(*args))


def test_a_failed_build_falls_back_once_and_is_not_retried(tmp_path, monkeypatch, fresh_kernel_state, caplog):
    """A compiler that fails: the reason is recorded under the cache key and logged once; the next
    process (here: a cleared cache) does not run the compiler again."""
    bad = tmp_path / "bad-cxx"
    bad.write_text("#!/bin/sh\necho 'routed_kernel.cpp:1: error: simulated failure' >&2\nexit 1\n")
    bad.chmod(0o755)
    monkeypatch.setenv("SR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CXX", str(bad))
    with caplog.at_level("WARNING", logger=native.__name__):
        status = native.kernel_status()
        assert native.kernel_status() == status  # cached in the process: said once
    assert status.startswith("fallback: tiered SDPA (the build failed (")
    assert "simulated failure" in status
    assert sum("unavailable" in r.message for r in caplog.records) == 1
    runs = []
    real_run = subprocess.run
    monkeypatch.setattr(native.subprocess, "run", lambda cmd, **kw: runs.append(cmd) or real_run(cmd, **kw))
    native.kernel.cache_clear()
    again = native.kernel_status()
    assert "failed before" in again and "simulated failure" in again
    assert [c for c in runs if "-shared" in c] == []  # only `--version` ran, no compile


def test_the_switch_turns_the_kernel_off(monkeypatch, fresh_kernel_state):
    monkeypatch.setenv(native.ENV_SWITCH, "0")
    assert native.kernel_status() == f"fallback: tiered SDPA ({native.ENV_SWITCH}=0)"
    assert not native.usable(torch.zeros(16, 16))


def test_a_kernel_that_disagrees_is_not_used(built, monkeypatch, fresh_kernel_state):
    """The first load checks the kernel on small problems; a wrong result means the tiered path."""
    monkeypatch.setattr(native, "build", lambda root=None: (built.path, built.built))
    real_call = native.call
    monkeypatch.setattr(native, "call", lambda *a, **kw: real_call(*a, **kw) + 1e-3)
    status = native.kernel_status()
    assert status.startswith("fallback: tiered SDPA (its output on a check problem differs")


def test_info_and_verbose_name_the_path_that_runs(monkeypatch, capsys):
    """`sr info NAME` (routed attention only) and `sr upscale -v` (CPU, tiered path) say which core runs."""
    from sr.batch.report import kernel_line
    from sr.cli import main
    from sr.inference import Upscaler

    monkeypatch.setattr(native, "kernel", lambda: native.Unavailable("simulated"))
    assert main(["info", "asa-base-x2"]) == 0
    lines = [ln.split(None, 2) for ln in capsys.readouterr().out.splitlines() if "attention kernel" in ln]
    assert lines == [["attention", "kernel", "fallback: tiered SDPA (simulated)"]]
    assert main(["info", "photo-conv-x2"]) == 0
    assert "attention kernel" not in capsys.readouterr().out  # no routed attention: no line
    line = kernel_line(Upscaler("asa-base", device="cpu"))
    assert line == "attention kernel: fallback: tiered SDPA (simulated)"
    assert kernel_line(Upscaler("asa-base", device="cpu", attention_path="static")) is None
    assert kernel_line(Upscaler("photo-conv", device="cpu")) is None


@pytest.mark.parametrize("switch", ["1", "0"])
def test_an_eval_forward_under_cpu_bf16_autocast_runs(switch, built, monkeypatch, fresh_kernel_state):
    """A bf16 GAN fine-tune's EMA forward: the network at inference inside autocast, the kernel's first
    load (its fp32 agreement check) included, and the tiered path writing bf16 results into its rows."""
    from sr.models import SRNet, build_config

    monkeypatch.setattr(native, "build", lambda root=None: (built.path, built.built))
    monkeypatch.setenv(native.ENV_SWITCH, switch)
    torch.manual_seed(0)
    net = SRNet(build_config("asa-base", scale=2)).eval()
    x = torch.rand(2, 3, 40, 40)
    with torch.no_grad():
        with torch.autocast("cpu", dtype=torch.bfloat16):  # first: the kernel's first load runs inside
            out = net(x)
        ref = net(x)
    assert out.shape == ref.shape and out.dtype == torch.bfloat16
    assert (out.float() - ref).abs().max().item() < 0.05
