"""--precision: names, the CPU's bf16 check with /proc/cpuinfo faked both ways, auto's per-model record."""

from __future__ import annotations

import pytest
import torch

from sr import cpu
from sr import weights as sr_weights
from sr.inference import UpscaleError, Upscaler, precision
from sr.inference.precision import PrecisionError, parse_precision, resolve_dtype
from sr.models import NetConfig, SRNet
from sr.models.registry import ASA
from sr.weights import save_weights

CPU = torch.device("cpu")
# Abridged flag lines: a Sapphire Rapids Xeon (AMX), an EPYC Zen 5 (AVX-512 BF16, no AMX) and an EPYC
# Zen 3 (AVX2 only: bf16 emulated).
XEON_AMX = "fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8"
EPYC_NO_AMX = "fpu avx2 avx512f avx512_bf16"
EPYC_AVX2 = "fpu avx avx2 fma f16c"
LARGE, SMALL = 800 * 600, 192 * 192  # pass inputs either side of where bf16 pays on AVX-512 BF16


@pytest.fixture
def cpuinfo(tmp_path, monkeypatch):
    """Point the check at a fake /proc/cpuinfo with the given flags line."""

    def fake(flags: str) -> None:
        path = tmp_path / "cpuinfo"
        path.write_text(f"processor\t: 0\nmodel name\t: test cpu\nflags\t\t: {flags}\n\n")
        monkeypatch.setattr(cpu, "CPUINFO", str(path))
        # torch's own bf16 check reads the real CPU: answer as such a CPU would (AVX-512 runs bf16)
        monkeypatch.setattr(precision, "cpu_runs_bf16", lambda: "avx512f" in flags.split())

    return fake


@pytest.fixture
def record(monkeypatch):
    """Replace the measured bf16 costs with the given ones."""

    def fake(costs: dict[str, float]) -> None:
        monkeypatch.setattr(precision, "BF16_PSNR_COST_DB", costs)

    return fake


def test_names_parse_and_unknown_ones_fail_clearly():
    assert [parse_precision(t) for t in ("auto", " FP32 ", "bf16")] == ["auto", "fp32", "bf16"]
    with pytest.raises(PrecisionError, match="precision must be one of auto, fp32, bf16, got 'fp16'"):
        parse_precision("fp16")


def test_the_bf16_kind_comes_from_the_flags(cpuinfo):
    for flags, kind in ((XEON_AMX, "amx"), (EPYC_NO_AMX, "avx512_bf16"), (EPYC_AVX2, "emulated")):
        cpuinfo(flags)
        assert cpu.cpu_bf16_kind() == kind
        assert cpu.cpu_has_native_bf16() is (kind != "emulated")


def test_without_cpuinfo_torchs_amx_check_decides(tmp_path, monkeypatch):
    monkeypatch.setattr(cpu, "CPUINFO", str(tmp_path / "missing"))
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True, raising=False)
    assert cpu.cpu_has_native_bf16() is True
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
    assert cpu.cpu_has_native_bf16() is False


def test_auto_on_an_amx_cpu_takes_bf16_with_a_recorded_cost_within_the_limit(cpuinfo, record):
    record({"m-x2": 0.004, "m-x4": 0.03})
    cpuinfo(XEON_AMX)
    assert resolve_dtype("auto", CPU, ["m-x2"]) == torch.bfloat16
    assert resolve_dtype("auto", CPU, ["m-x2"], pixels=SMALL) == torch.bfloat16  # faster at every size
    assert resolve_dtype("auto", CPU, ["m-x4"]) == torch.float32  # costs more than 0.01 dB
    assert resolve_dtype("auto", CPU, ["mine-x2"]) == torch.float32  # no record: cost unknown
    assert resolve_dtype("auto", CPU, ["m-x2", "m-x4"]) == torch.float32  # a blend: both must pass
    assert resolve_dtype("auto", CPU, []) == torch.float32


def test_auto_with_avx512_bf16_alone_takes_bf16_from_the_measured_size(cpuinfo, record):
    record({"m-x2": 0.004, "m-x4": 0.03})
    cpuinfo(EPYC_NO_AMX)
    start = precision.BF16_FROM_PIXELS["avx512_bf16"]
    assert SMALL < start <= LARGE
    assert resolve_dtype("auto", CPU, ["m-x2"], pixels=LARGE) == torch.bfloat16
    assert resolve_dtype("auto", CPU, ["m-x2"], pixels=start) == torch.bfloat16
    assert resolve_dtype("auto", CPU, ["m-x2"], pixels=start - 1) == torch.float32
    assert resolve_dtype("auto", CPU, ["m-x2"]) == torch.bfloat16  # size unknown: a large input
    assert resolve_dtype("auto", CPU, ["m-x4"], pixels=LARGE) == torch.float32  # the record still rules


def test_auto_where_bf16_is_emulated_stays_fp32_and_forcing_it_fails_clearly(cpuinfo, record):
    record({"m-x2": 0.004})
    cpuinfo(EPYC_AVX2)
    assert resolve_dtype("auto", CPU, ["m-x2"], pixels=LARGE) == torch.float32
    with pytest.raises(PrecisionError, match="this CPU cannot run bf16 convolutions"):
        resolve_dtype("bf16", CPU, ["m-x2"])


def test_auto_says_why(cpuinfo, record):
    record({"m-x2": 0.004, "m-x4": 0.03})
    cpuinfo(EPYC_NO_AMX)
    assert precision.choose_dtype("auto", CPU, ["m-x2"], LARGE) == (
        torch.bfloat16, "bf16: AVX512_BF16, measured 1.9-2.3x fp32 from 800 px")
    dtype, why = precision.choose_dtype("auto", CPU, ["m-x2"], SMALL)
    assert dtype == torch.float32 and why.startswith("fp32: input under 0.26 MP")
    assert precision.choose_dtype("auto", CPU, ["mine-x2"], LARGE)[1] == (
        "fp32: no measured bf16 quality cost for mine-x2")
    assert precision.choose_dtype("auto", CPU, ["m-x4"], LARGE)[1] == (
        "fp32: bf16 costs more than 0.01 dB (0.0300 dB on valid)")
    assert precision.choose_dtype("fp32", CPU, ["m-x2"]) == (torch.float32, "fp32: asked for")
    cpuinfo(EPYC_AVX2)
    assert precision.choose_dtype("auto", CPU, ["m-x2"])[1].startswith("fp32: no AMX or AVX512_BF16")


def test_explicit_precisions_and_gpu_auto(cpuinfo):
    cpuinfo(EPYC_NO_AMX)
    assert resolve_dtype("bf16", CPU, ["anything"]) == torch.bfloat16  # forced: runs, if slowly
    assert resolve_dtype("fp32", CPU) == torch.float32
    assert resolve_dtype("auto", torch.device("mps"), ["m-x2"]) == torch.float16  # GPU choices unchanged


def test_the_record_is_only_for_the_shipped_files(tiny_x2):
    from sr.inference.precision import record_name
    from sr.weights import describe

    assert record_name(describe(sr_weights.WEIGHTS_DIR / "asa-base-x2.safetensors")) == "asa-base-x2"
    assert "asa-base-x2" in precision.BF16_PSNR_COST_DB
    assert record_name(describe(tiny_x2)) is None
    assert record_name(describe(tiny_x2), shipped_dir=tiny_x2.parent) == tiny_x2.stem  # a folder given


def test_engine_resolves_per_scale_and_passes_precision_to_its_networks(weights_dir, cpuinfo, record):
    cpuinfo(XEON_AMX)
    record({"tiny-x2": 0.002, "tiny-x3": 0.05})
    off_record = Upscaler("tiny", device="cpu", weights_dir=weights_dir)  # not the package's files
    assert off_record.dtype_for(2) == torch.float32
    # as if they were the package's own files
    up = Upscaler("tiny", device="cpu", weights_dir=weights_dir, threads=1, shipped_dir=weights_dir)
    assert [up.dtype_for(s) for s in (2, 3, 4)] == [torch.bfloat16, torch.float32, torch.float32]
    assert up.dtype == torch.bfloat16
    assert up.network(2).head.weight.dtype == torch.bfloat16
    forced = Upscaler("tiny", device="cpu", weights_dir=weights_dir, threads=1, precision="fp32",
                      shipped_dir=weights_dir)
    assert forced.dtype_for(2) == torch.float32
    with pytest.raises(UpscaleError, match="precision must be one of auto, fp32, bf16, got 'half'"):
        Upscaler("tiny", device="cpu", weights_dir=weights_dir, precision="half")


def test_the_engine_loads_small_inputs_fp32_where_bf16_pays_only_on_large_ones(weights_dir, cpuinfo, record,
                                                                                monkeypatch, weight_reads):
    from sr.request import UpscaleRequest

    cpuinfo(EPYC_NO_AMX)
    record({"tiny-x2": 0.002})
    monkeypatch.setitem(precision.BF16_FROM_PIXELS, "avx512_bf16", 40 * 40)
    up = Upscaler("tiny", device="cpu", weights_dir=weights_dir, threads=1, shipped_dir=weights_dir)
    assert up.dtype_for(2, 39 * 40) == torch.float32 and up.dtype_for(2, 40 * 40) == torch.bfloat16
    nets = {}
    for side in (16, 48):  # under and over the (here lowered) start of bf16; the upscale loads what runs
        reads = len(weight_reads)
        up.plan(side, side, UpscaleRequest(scale=2))
        assert len(weight_reads) == reads  # planning loads nothing
        nets[side] = up.network(2, side * side)  # what a pass on a side x side input runs
    assert weight_reads == ["tiny-x2", "tiny-x2"]  # one network per dtype
    assert nets[48].head.weight.dtype == torch.bfloat16 and nets[48] is up.network(2)  # a large input's
    assert nets[16].head.weight.dtype == torch.float32
    assert up.network(2, 16 * 16) is nets[16]  # loaded once per dtype
    assert up.precision_for(2, 16 * 16)[1].startswith("fp32: input under")


def test_a_blend_needs_both_records_but_denoise_0_only_the_default_familys(tmp_path, cpuinfo, record):
    for family, seed in (("asa-base", 0), ("photo", 1)):  # one architecture, other weights
        torch.manual_seed(seed)
        net = SRNet(NetConfig(scale=2, channels=8, blocks=2, attn_every=2, heads=2, attention="adaptive",
                              attn_options=dict(ASA)))
        save_weights(net, tmp_path / f"{family}-x2.safetensors")
    cpuinfo(XEON_AMX)
    record({"asa-base-x2": 0.004, "photo-x2": 0.02})  # photo over the bar
    dtype = {d: Upscaler("photo", device="cpu", weights_dir=tmp_path, denoise=d,
                                 shipped_dir=tmp_path).dtype_for(2)
             for d in (0, 0.5, 1)}
    assert dtype == {0: torch.bfloat16, 0.5: torch.float32, 1: torch.float32}
    record({"asa-base-x2": 0.02, "photo-x2": 0.004})  # the other way round
    dtype = {d: Upscaler("photo", device="cpu", weights_dir=tmp_path, denoise=d,
                                 shipped_dir=tmp_path).dtype_for(2)
             for d in (0, 0.5, 1)}
    assert dtype == {0: torch.float32, 0.5: torch.float32, 1: torch.bfloat16}


def _cpuinfo_with_model(tmp_path, monkeypatch, flags: str, vendor: str, family: int) -> None:
    path = tmp_path / "cpuinfo-model"
    path.write_text(f"processor\t: 0\nvendor_id\t: {vendor}\ncpu family\t: {family}\nflags\t\t: {flags}\n\n"
                    f"processor\t: 1\nvendor_id\t: Other\ncpu family\t: 1\n")
    monkeypatch.setattr(cpu, "CPUINFO", str(path))
    monkeypatch.setattr(precision, "cpu_runs_bf16", lambda: "avx512f" in flags.split())


def test_cpu_model_reads_the_first_processors_vendor_and_family(tmp_path, monkeypatch):
    _cpuinfo_with_model(tmp_path, monkeypatch, EPYC_NO_AMX, "AuthenticAMD", 25)
    assert cpu.cpu_model() == ("AuthenticAMD", 25)
    (tmp_path / "trimmed").write_text("processor\t: 0\nflags\t\t: fpu\n")
    assert cpu.cpu_model(str(tmp_path / "trimmed")) is None
    assert cpu.cpu_model(str(tmp_path / "missing")) is None


def test_auto_on_zen4_takes_bf16_at_every_size_and_zen5_keeps_its_start(tmp_path, monkeypatch, record):
    record({"m-x2": 0.004, "m-x4": 0.03})
    _cpuinfo_with_model(tmp_path, monkeypatch, EPYC_NO_AMX, "AuthenticAMD", 25)  # Zen 4
    assert precision.bf16_from_pixels() == 0
    dtype, why = precision.choose_dtype("auto", CPU, ["m-x2"], SMALL)
    assert dtype == torch.bfloat16
    assert why == "bf16: AVX512_BF16 (AMD Zen 4), measured 1.7-2.0x fp32 at 96-800 px"
    assert resolve_dtype("auto", CPU, ["m-x4"], pixels=SMALL) == torch.float32  # the record still rules
    _cpuinfo_with_model(tmp_path, monkeypatch, EPYC_NO_AMX, "AuthenticAMD", 26)  # Zen 5: the kind's rule
    assert precision.bf16_from_pixels() == precision.BF16_FROM_PIXELS["avx512_bf16"]
    assert resolve_dtype("auto", CPU, ["m-x2"], pixels=SMALL) == torch.float32
    _cpuinfo_with_model(tmp_path, monkeypatch, EPYC_AVX2, "AuthenticAMD", 25)  # Zen 3: same family, no bf16
    assert precision.bf16_from_pixels() is None
    assert resolve_dtype("auto", CPU, ["m-x2"], pixels=LARGE) == torch.float32


def test_every_file_auto_and_its_look_run_is_on_the_record_within_the_bar():
    """auto's two sides and the family --look blends photo with: each of their shipped files has a
    measured bf16 cost within MAX_BF16_COST_DB, so none of them falls back to fp32 for want of one."""
    from sr.families import AUTO, BY_NAME

    families = [*AUTO.sides, BY_NAME[AUTO.lossy].look_with]
    files = [p.stem for f in families for p in sorted(sr_weights.WEIGHTS_DIR.glob(f"{f}-x*.safetensors"))]
    assert len(files) == 9
    assert {f: precision.BF16_PSNR_COST_DB.get(f) for f in files if
            precision.BF16_PSNR_COST_DB.get(f, 1) > precision.MAX_BF16_COST_DB} == {}


def test_a_blends_cost_is_its_own_measured_one_never_derived_from_its_files(record, monkeypatch, cpuinfo):
    cpuinfo(XEON_AMX)
    record({"a-x2": 0.004, "b-x2": 0.005, "c-x2": 0.007, "d-x2": 0.001})
    monkeypatch.setattr(precision, "BF16_BLEND_MEASURED_DB", {
        frozenset({"a-x2", "b-x2"}): (0.001, 0.003, -0.002), frozenset({"a-x2", "c-x2"}): (0.012,),
        frozenset({"a-x2", "b-x2", "d-x2"}): (0.002,), frozenset({"b-x2", "d-x2"}): (0.0095,)})
    assert precision.bf16_cost(["a-x2"]) == 0.004
    assert precision.bf16_cost(["b-x2", "a-x2"]) == 0.003  # the files in any order
    assert precision.bf16_cost(["a-x2", "c-x2"]) == 0.012  # each file within the bar, the blend not
    assert precision.bf16_cost(["b-x2", "c-x2"]) is None  # both on record, the blend never measured
    assert precision.bf16_cost(["a-x2", "mine-x2"]) is None and precision.bf16_cost([]) is None
    assert precision.bf16_cost([None]) is None
    # a three-file blend: the largest over its own points and its two-file edges' (a+b: 0.003, b+d: 0.0095)
    assert precision.bf16_cost(["d-x2", "a-x2", "b-x2"]) == 0.0095
    record({"a-x2": 0.004, "c-x2": 0.007})  # b-x2 retrained, its cost not yet measured: nor its blends'
    assert precision.bf16_cost(["a-x2", "b-x2"]) is None
    record({"a-x2": 0.004, "b-x2": 0.005, "c-x2": 0.007})
    assert precision.bf16_cost_ok(["a-x2", "b-x2"]) and not precision.bf16_cost_ok(["a-x2", "c-x2"])
    assert precision.choose_dtype("auto", CPU, ["a-x2", "b-x2"])[0] == torch.bfloat16
    assert precision.choose_dtype("auto", CPU, ["a-x2", "c-x2"])[1] == (
        "fp32: bf16 costs more than 0.01 dB (0.0120 dB on valid)")
    assert precision.choose_dtype("auto", CPU, ["b-x2", "c-x2"])[1] == (
        "fp32: no measured bf16 quality cost for the blend of b-x2, c-x2")
    assert precision.choose_dtype("auto", CPU, ["a-x2", "mine-x2"])[1] == (
        "fp32: no measured bf16 quality cost for mine-x2")


def test_every_blend_auto_can_run_from_the_shipped_files_is_measured():
    """--look (photo with photo-natural), --denoise (asa-base with photo) and both, at every shipped
    scale: each has a measured cost on record, so the choice is the measurement's, not a guess."""
    for s in (2, 3, 4):
        for names in ((f"photo-x{s}", f"photo-natural-x{s}"), (f"asa-base-x{s}", f"photo-x{s}"),
                      (f"asa-base-x{s}", f"photo-x{s}", f"photo-natural-x{s}")):
            assert precision.bf16_cost(names) is not None, names


def test_photo_natural_and_its_look_blends_run_bf16_where_photo_does(cpuinfo):
    """The shipped files under auto on a CPU that runs bf16: photo-natural alone at every scale, as
    photo, and a look blend of the two (alone, under auto) at every scale too, its measured costs on
    valid within the bar (at most 0.0022 dB); with a denoise as well fp32 at x2, where the denoise
    blend, one of its edges, measured 0.0118 dB at D = 0.75."""
    cpuinfo(XEON_AMX)
    engines = {
        "photo": Upscaler("photo", device="cpu", threads=1),
        "photo-natural": Upscaler("photo-natural", device="cpu", threads=1),
        "look 0.5": Upscaler("photo", device="cpu", threads=1, look=0.5),
        "auto, look 0.5": Upscaler("auto", device="cpu", threads=1, look=0.5).sides["photo"],
        "look 0.5, denoise 0.5": Upscaler("photo", device="cpu", threads=1, look=0.5, denoise=0.5),
    }
    bf16, fp32 = torch.bfloat16, torch.float32
    dtypes = {name: [up.dtype_for(s) for s in (2, 3, 4)] for name, up in engines.items()}
    assert dtypes == {"photo": [bf16] * 3, "photo-natural": [bf16] * 3, "look 0.5": [bf16] * 3,
                      "auto, look 0.5": [bf16] * 3, "look 0.5, denoise 0.5": [fp32, bf16, bf16]}
