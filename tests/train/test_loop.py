"""Training smoke tests: loss falls, resume is exact, signals checkpoint, DDP on CPU, export."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from benchmarks.serve import free_port
from sr.cli import main as sr_main
from sr.evaluation import set_name, set_names
from sr.models import build_model
from sr.train.config import LOSS_CHOICES, load_config
from sr.train.learner import PIXEL_LOSSES, use_bf16_autocast
from sr.train.loop import Trainer, lr_at
from sr.train.validation import selection_score
from sr.weights import load_weights
from tests.train.runs import export_checkpoint, read_log, textures, tiny_config

REPO = Path(__file__).resolve().parents[2]


def test_lr_schedule_warms_up_then_decays():
    cfg = load_config(None, lr=1e-3, min_lr=1e-6, warmup=10, steps=110)
    assert lr_at(0, cfg) == pytest.approx(1e-4)
    assert lr_at(9, cfg) == pytest.approx(1e-3)
    assert lr_at(60, cfg) == pytest.approx((1e-3 + 1e-6) / 2, rel=1e-6)
    assert lr_at(110, cfg) == pytest.approx(1e-6)


def test_cycle_start_restarts_the_schedule_there():
    # a resumed run restarted at step 100: warm-up and cosine again, now ending at 210
    cfg = load_config(None, lr=1e-3, min_lr=1e-6, warmup=10, steps=210, cycle_start=100)
    assert lr_at(100, cfg) == pytest.approx(1e-4)
    assert lr_at(109, cfg) == pytest.approx(1e-3)
    assert lr_at(160, cfg) == pytest.approx((1e-3 + 1e-6) / 2, rel=1e-6)
    assert lr_at(210, cfg) == pytest.approx(1e-6)
    with pytest.raises(ValueError, match="cycle-start"):
        Trainer(load_config(None, steps=100, cycle_start=100))


@pytest.mark.parametrize("amx", [True, False])
def test_amp_auto_is_bf16_on_cuda_and_on_amx_cpus_only(monkeypatch, amx):
    monkeypatch.setattr("sr.train.learner.cpu_has_amx", lambda: amx)
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert use_bf16_autocast("auto", cpu) is amx
    assert use_bf16_autocast("auto", cuda) is True
    assert use_bf16_autocast("bf16", cpu) is True and use_bf16_autocast("off", cpu) is False
    assert use_bf16_autocast("off", cuda) is False
    with pytest.raises(ValueError, match="--amp 'fp16' is not one of: auto, bf16, off"):
        use_bf16_autocast("fp16", cpu)


@pytest.mark.parametrize("amx", [True, False])
def test_trainer_follows_amp_auto_and_logs_it(tmp_path, monkeypatch, amx):
    monkeypatch.setattr("sr.train.learner.cpu_has_amx", lambda: amx)
    t = Trainer(tiny_config(tmp_path, steps=6, val_every=6, device="cpu"))
    assert t.learner.autocast == dict(device_type="cpu", dtype=torch.bfloat16, enabled=amx)
    for net in (t.model, t.ema):  # channels-last on CPU too: oneDNN's native conv layout
        assert net.head.weight.is_contiguous(memory_format=torch.channels_last)
    t.fit()
    log = read_log(t.cfg.run_dir)
    assert [r["amp"] for r in log if r.get("event") == "start"] == [amx]
    assert all(math.isfinite(r["loss"]) for r in log if "loss" in r)


def test_loss_falls_and_validation_logged(tmp_path):
    cfg = tiny_config(tmp_path)
    best = Trainer(cfg).fit()
    log = read_log(cfg.run_dir)
    losses = [r["loss"] for r in log if "loss" in r]
    assert losses[-1] < 0.7 * losses[0]
    vals = [r for r in log if r.get("event") == "val"]
    assert [v["step"] for v in vals] == [20, 40]
    assert best["on"] == "mean" and selection_score(best["results"], "mean") > 15
    assert (cfg.run_dir / "best.pt").is_file()
    assert json.loads((cfg.run_dir / "config.json").read_text())["patch"] == 16
    assert all(0 <= r["budget_mean"] <= 8 for r in log if "budget_mean" in r)


def test_rescale_trains_on_the_downscaled_copies_too(tmp_path):
    cfg = tiny_config(tmp_path, steps=2, val=[], rescale=[0.75], rgb_perm=0.5)
    Trainer(cfg).fit()
    start = next(r for r in read_log(cfg.run_dir) if r.get("event") == "start")
    assert start["images"] == 8  # 4 textures + their x0.75 copies
    assert json.loads((cfg.run_dir / "config.json").read_text())["rescale"] == [0.75]
    out = tmp_path / "w.safetensors"
    assert export_checkpoint(cfg.run_dir / "last.pt", out).returncode == 0
    _, meta = load_weights(out)
    assert meta["rescale"] == "0.75" and meta["loss"] == "l1"  # the recipe travels with the weights
    assert meta["rgb_perm"] == "0.5"


def test_mse_loss_is_what_trains_and_is_logged(tmp_path):
    # lr 0: both runs see the same weights and batches, so only the pixel loss differs
    frozen = dict(steps=5, lr=0.0, min_lr=0.0, warmup=1, log_every=5, val=[])
    l1_cfg = tiny_config(tmp_path / "l1", **frozen)
    mse_cfg = tiny_config(tmp_path / "mse", loss="mse", **frozen)
    Trainer(l1_cfg).fit()
    Trainer(mse_cfg).fit()
    (l1,) = [r["loss"] for r in read_log(l1_cfg.run_dir) if "loss" in r]
    log = read_log(mse_cfg.run_dir)
    (mse,) = [r["loss"] for r in log if "loss" in r]
    assert log[0]["pixel_loss"] == "mse"
    assert l1**2 <= mse < 0.5 * l1  # Jensen below; errors well under 1 above
    assert tuple(PIXEL_LOSSES) == LOSS_CHOICES  # the flag's choices are the losses there are
    with pytest.raises(ValueError, match="--loss 'huber' is not one of: l1, mse"):
        Trainer(tiny_config(tmp_path / "bad", loss="huber"))


def _loss_lines(run_dir: Path) -> list[dict]:
    """The log's loss lines without their timings: step, learning rate, every loss term."""
    timings = {"it_s", "seconds", "cpu_seconds", "data_share"}
    return [{k: v for k, v in r.items() if k not in timings} for r in read_log(run_dir) if "loss" in r]


@pytest.mark.parametrize("gan", [False, True], ids=["pixel", "gan"])
def test_resume_continues_exactly(tmp_path, gan):
    # fp32 on one CPU thread: a paused and resumed run is the uninterrupted run, bit for bit (the GAN
    # run's discriminator and its optimiser come back with the checkpoint too)
    extra = dict(gan_weight=0.1, frequency_weight=0.05, phase_weight=0.5, disc_width=8) if gan else {}
    kw = dict(steps=12, val=[], log_every=2, amp="off", **extra)
    straight = tiny_config(tmp_path / "a", **kw)
    Trainer(straight).fit()
    first = tiny_config(tmp_path / "b", **kw)
    Trainer(first).fit(stop_at=6)
    resumed = Trainer(tiny_config(tmp_path / "b", **kw), resume=True)
    assert resumed.step == 6
    resumed.fit()
    lines = _loss_lines(straight.run_dir)
    assert [r["step"] for r in lines] == [2, 4, 6, 8, 10, 12]
    assert all({"gan", "feature", "artefact", "phase", "disc"} <= set(r) for r in lines) is gan
    assert _loss_lines(first.run_dir) == lines
    a = torch.load(straight.run_dir / "last.pt", weights_only=False)
    b = torch.load(first.run_dir / "last.pt", weights_only=False)
    parts = ("model", "ema", "disc") if gan else ("model", "ema")
    assert ("disc" in a) is gan
    for part in parts:
        assert a[part].keys() == b[part].keys()
        for key in a[part]:
            assert torch.equal(a[part][key], b[part][key]), f"{part}.{key}"


def test_sigterm_writes_checkpoint_and_exits(tmp_path):
    cfg = tiny_config(tmp_path, steps=100000, val=[], ckpt_every=100000)
    cmd = [sys.executable, "-m", "sr", "train", "--name", cfg.name, "--preset", "asa-small", "--patch", "16",
           "--batch", "2", "--steps", "100000", "--train", *cfg.train, "--val", "--out", cfg.out,
           "--cache", cfg.cache, "--threads", "1", "--log-every", "1", "--ckpt-every", "100000"]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = cfg.run_dir / "log.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and not (log.is_file() and log.read_text().count('"loss"') >= 2):
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "stopped at step" in err and "Traceback" not in err
    ckpt = torch.load(cfg.run_dir / "last.pt", weights_only=False)
    assert ckpt["step"] >= 2


def test_time_limit_stops_with_checkpoint_and_validation_then_resumes(tmp_path, capsys):
    trainer = Trainer(tiny_config(tmp_path, steps=40, val_every=20, time_limit=1e-6))  # 60 microseconds
    trainer.fit()
    assert "time limit of 1e-06 min reached: stopped at step 1" in capsys.readouterr().err
    run_dir = trainer.run_dir
    assert torch.load(run_dir / "last.pt", weights_only=False)["step"] == 1
    assert [r["step"] for r in read_log(run_dir) if r.get("event") == "val"] == [1]  # validated on stopping
    assert torch.load(run_dir / "best.pt", weights_only=False)["step"] == 1
    resumed = Trainer(tiny_config(tmp_path, steps=40, val_every=20, time_limit=0.0), resume=True)
    resumed.fit()
    assert resumed.step == 40
    assert [r["step"] for r in read_log(run_dir) if r.get("event") == "val"] == [1, 20, 40]


def test_time_limit_on_the_last_step_validates_once(tmp_path):
    # the last step is validated by the schedule itself; the time-limit stop must not do it again
    trainer = Trainer(tiny_config(tmp_path, steps=1, val_every=20, time_limit=1e-6))
    trainer.fit()
    assert [r["step"] for r in read_log(trainer.run_dir) if r.get("event") == "val"] == [1]


def _scripted_validation(monkeypatch, psnrs: dict[str, list[float]]) -> None:
    """validate() returns these per-set PSNRs in turn: the ranking rule is under test, not the net."""
    calls = iter(range(len(next(iter(psnrs.values())))))

    def fake(model, cfg, device):
        i = next(calls)
        return {name: {"psnr": values[i], "ssim": 0.5} for name, values in psnrs.items()}

    monkeypatch.setattr("sr.train.loop.validate", fake)


def _two_val_sets(tmp_path: Path, **kw):
    return tiny_config(tmp_path, val=[str(tmp_path / "Set5"), str(tmp_path / "Set14")], val_every=1, **kw)


def test_selection_score_is_the_mean_or_one_named_set():
    results = {"Set5": {"psnr": 30.0}, "Set14": {"psnr": 26.0}}
    assert selection_score(results, "mean") == 28.0
    assert selection_score(results, "Set14") == 26.0
    assert selection_score(results, "Urban100") is None and selection_score({}, "mean") is None


@pytest.mark.parametrize("best_on, step", [("mean", 2), ("Set5", 1), ("Set14", 3)])
def test_best_checkpoint_ranks_on_the_mean_of_the_val_sets_or_one_named_set(tmp_path, monkeypatch,
                                                                            best_on, step):
    # Set5 peaks at step 1, Set14 at step 3, their mean (25, 25.75, 25.5) at step 2
    _scripted_validation(monkeypatch, {"Set5": [30.0, 29.5, 28.0], "Set14": [20.0, 22.0, 23.0]})
    cfg = _two_val_sets(tmp_path, steps=3, best_on=best_on)
    best = Trainer(cfg).fit()
    assert best["step"] == step and best["on"] == best_on
    assert torch.load(cfg.run_dir / "best.pt", weights_only=False)["step"] == step


def test_best_on_must_name_a_val_set(tmp_path):
    message = "--best-on 'Set8' names no --val set; use mean or one of: Set5, Set14"
    with pytest.raises(ValueError, match=message):
        Trainer(_two_val_sets(tmp_path, steps=3, best_on="Set8"))
    # nothing validated: nothing to rank
    Trainer(tiny_config(tmp_path / "noval", steps=3, val=[], best_on="Set8"))
    with pytest.raises(ValueError, match="--val folders need distinct names, got: Set5, Set5"):
        Trainer(tiny_config(tmp_path, val=[str(tmp_path / "a" / "Set5"), str(tmp_path / "b" / "Set5")]))


def test_val_sets_go_by_the_names_sr_eval_prints(tmp_path, monkeypatch):
    # generic folder names (DIV2K/HR, Set14/HR) take the parent's, so two such sets stay distinct
    val = [str(tmp_path / "DIV2K" / "HR"), str(tmp_path / "Set14" / "HR")]
    _scripted_validation(monkeypatch, {"DIV2K": [30.0], "Set14": [25.0]})
    best = Trainer(tiny_config(tmp_path, steps=1, val=val, val_every=1, best_on="Set14")).fit()
    assert set(best["results"]) == {"DIV2K", "Set14"} and best["on"] == "Set14"
    assert set_names([Path(v) for v in val]) == list(best["results"])


def test_resumed_run_from_before_best_on_keeps_ranking_on_its_first_set(tmp_path, monkeypatch, capsys):
    # means: 25, 25.5 | 26.25, 26 | 25.25; Set5 alone peaks at step 1
    _scripted_validation(monkeypatch, {"Set5": [30.0, 29.0, 29.5, 28.0, 28.0],
                                       "Set14": [20.0, 22.0, 23.0, 24.0, 22.5]})
    cfg = _two_val_sets(tmp_path, steps=4, best_on="Set5")
    Trainer(cfg).fit(stop_at=2)
    # make it a run written before --best-on: no best_on in config.json, best keyed by the first set's psnr
    saved = json.loads((cfg.run_dir / "config.json").read_text())
    del saved["best_on"]
    (cfg.run_dir / "config.json").write_text(json.dumps(saved))
    ckpt = torch.load(cfg.run_dir / "last.pt", weights_only=False)
    ckpt["best"] = {"psnr": 30.0, "step": 1, "results": ckpt["best"]["results"]}
    torch.save(ckpt, cfg.run_dir / "last.pt")

    assert sr_main(["train", "--resume", str(cfg.run_dir)]) == 0
    assert "best.pt: step 1 (Set5 30.000 dB, Set14 20.000 dB; ranked on Set5)" in capsys.readouterr().out
    assert torch.load(cfg.run_dir / "best.pt", weights_only=False)["step"] == 1
    # switching the rule on resume re-scores the held best (step 1, mean 25) under the new rule
    assert sr_main(["train", "--resume", str(cfg.run_dir), "--steps", "5", "--best-on", "mean"]) == 0
    assert "best.pt: step 5 (Set5 28.000 dB, Set14 22.500 dB; ranked on mean)" in capsys.readouterr().out
    assert torch.load(cfg.run_dir / "best.pt", weights_only=False)["step"] == 5


def test_fresh_run_refuses_a_folder_holding_another_run(tmp_path):
    cfg = tiny_config(tmp_path, steps=2, val=[])
    Trainer(cfg).fit()
    before = (cfg.run_dir / "log.jsonl").read_text()
    with pytest.raises(ValueError, match="--resume"):
        Trainer(tiny_config(tmp_path, steps=2, val=[]))
    assert (cfg.run_dir / "log.jsonl").read_text() == before


def test_init_from_other_scale_copies_matching_tensors(tmp_path):
    cfg2 = tiny_config(tmp_path / "x2", steps=5, val=[])
    Trainer(cfg2).fit()
    cfg3 = tiny_config(tmp_path / "x3", scale=3, steps=5, val=[], init=str(cfg2.run_dir / "last.pt"))
    t3 = Trainer(cfg3)
    src = torch.load(cfg2.run_dir / "last.pt", weights_only=False)["ema"]
    torch.testing.assert_close(t3.model.state_dict()["head.weight"], src["head.weight"])
    assert t3.model.state_dict()["upsample.weight"].shape[0] == 27  # fresh x3 upsampler


def test_init_grows_a_deeper_preset_that_starts_as_the_loaded_network(tmp_path):
    base = tiny_config(tmp_path / "base", preset="asa-base", steps=3, val=[])
    Trainer(base).fit()
    deep = tiny_config(tmp_path / "deep", preset="asa-deep", steps=3, val=[],
                       init=str(base.run_dir / "last.pt"))
    t = Trainer(deep)
    grown = {"body.9.", "body.10.", "body.11.", "body.12."}  # res blocks 8-10 and the third attention
    init = read_log(deep.run_dir)[0]
    assert {k[: k.index(".", 5) + 1] for k in init["fresh_tensors"]} == grown
    src = build_model("asa-base-x2").eval().to(memory_format=torch.channels_last)  # the trainer's layout
    src.load_state_dict(torch.load(base.run_dir / "last.pt", weights_only=False)["ema"])
    x = torch.rand(1, 3, 20, 28)
    with torch.no_grad():
        torch.testing.assert_close(t.model.eval()(x), src(x), rtol=0, atol=0)
    assert t.model.body[9].conv2.weight.abs().sum() == 0 and t.model.body[11].proj.weight.abs().sum() == 0
    assert t.model.body[9].conv1.weight.abs().sum() > 0  # only the residual output starts at zero
    t.model.train()
    t.fit()
    assert t.model.body[9].conv2.weight.abs().sum() > 0  # the grown blocks train


def test_init_refuses_a_checkpoint_sharing_no_tensor(tmp_path):
    foreign = tmp_path / "foreign.pt"
    torch.save({"ema": {"other.weight": torch.zeros(3)}}, foreign)
    with pytest.raises(ValueError, match="shares no tensor"):
        Trainer(tiny_config(tmp_path, steps=2, val=[], init=str(foreign)))


def test_export_writes_metadata_and_loads(tmp_path):
    cfg = tiny_config(tmp_path, steps=20, val_every=5)
    Trainer(cfg).fit(stop_at=12)  # last.pt at step 12; the latest validation was at step 10
    out = tmp_path / "w.safetensors"
    r = export_checkpoint(cfg.run_dir / "last.pt", out)
    assert r.returncode == 0, r.stderr
    assert "not validated at that step" in r.stdout
    _, meta = load_weights(out)
    assert int(meta["steps"]) == 12 and json.loads(meta["validation"]) == {}  # never the best step's scores

    Trainer(cfg, resume=True).fit()  # to step 20, validated there
    val = [rec for rec in read_log(cfg.run_dir) if rec.get("event") == "val"]
    assert [rec["step"] for rec in val] == [5, 10, 15, 20]
    for ckpt in ("last.pt", "best.pt"):
        r = export_checkpoint(cfg.run_dir / ckpt, out)
        assert r.returncode == 0, r.stderr
        model, meta = load_weights(out)
        assert meta["preset"] == "asa-small" and meta["scale"] == "2"
        rec = next(rec for rec in val if rec["step"] == int(meta["steps"]))
        name = set_name(cfg.val[0])  # .../val: a generic name, so the tmp folder's
        scores = json.loads(meta["validation"])[name]
        assert scores["psnr"] == pytest.approx(rec[f"{name}_psnr"])  # the exported step's own validation
    assert int(meta["best_step"]) == int(meta["steps"])
    assert meta["loss"] == "l1" and "rescale" not in meta and "rgb_perm" not in meta
    assert meta["hardware"] == torch.load(cfg.run_dir / "best.pt", weights_only=False)["hardware"]
    assert meta["hardware"].endswith("CPU x1")  # the training machine (1 thread), as the run recorded it
    # a GPU-trained checkpoint exported on this CPU machine keeps the GPU as its training hardware
    ckpt = torch.load(cfg.run_dir / "last.pt", weights_only=False)
    ckpt["hardware"] = "NVIDIA H200 x1"
    torch.save(ckpt, tmp_path / "gpu.pt")
    assert export_checkpoint(tmp_path / "gpu.pt", out).returncode == 0
    assert load_weights(out)[1]["hardware"] == "NVIDIA H200 x1"
    bad = export_checkpoint(tmp_path / "nope.pt", out)
    assert bad.returncode != 0 and "checkpoint not found" in bad.stderr and "Traceback" not in bad.stderr


def test_init_from_exported_weights_continues_their_steps_and_time(tmp_path):
    first = tiny_config(tmp_path / "a", steps=10, val_every=10)
    Trainer(first).fit()
    shipped = tmp_path / "shipped.safetensors"
    assert export_checkpoint(first.run_dir / "last.pt", shipped).returncode == 0
    _, before = load_weights(shipped)

    again = tiny_config(tmp_path / "b", steps=6, val_every=3, init=str(shipped))
    t = Trainer(again)
    t.fit()
    assert t.progress.lineage == {"from": "shipped.safetensors", "steps": 10,
                         "seconds": float(before["train_seconds"]), "continues": True}
    out = tmp_path / "next.safetensors"
    for ckpt in ("last.pt", "best.pt"):
        r = export_checkpoint(again.run_dir / ckpt, out)
        assert r.returncode == 0, r.stderr
        _, meta = load_weights(out)
        assert meta["init"] == "shipped.safetensors (step 10)"
        assert float(meta["train_seconds"]) >= float(before["train_seconds"])
    assert meta["steps"] == "16" and int(meta["best_step"]) in (13, 16)  # 10 inherited + this run's
    info = subprocess.run([sys.executable, "-m", "sr", "info", str(out)],
                          cwd=REPO, capture_output=True, text=True)
    assert "started from" in info.stdout and "shipped.safetensors (step 10)" in info.stdout

    # x2 weights starting an x3 run: named, but their steps are not x3's
    x3 = tiny_config(tmp_path / "c", scale=3, steps=2, val=[], init=str(shipped))
    t3 = Trainer(x3)
    assert t3.progress.lineage["continues"] is False and t3.progress.lineage["steps"] == 10
    t3.fit()
    assert export_checkpoint(x3.run_dir / "last.pt", out).returncode == 0
    _, meta = load_weights(out)
    assert meta["steps"] == "2" and meta["init"] == "shipped.safetensors (step 10)"


def test_bad_config_is_a_clear_error(tmp_path):
    toml = tmp_path / "c.toml"
    toml.write_text("[train]\nbatchsize = 3\n")
    r = subprocess.run([sys.executable, "-m", "sr", "train", "--config", str(toml)], cwd=REPO,
                       capture_output=True, text=True)
    assert r.returncode == 2 and "unknown training settings: batchsize" in r.stderr
    r = subprocess.run([sys.executable, "-m", "sr", "train", "--train", str(tmp_path / "missing"),
                        "--out", str(tmp_path)], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 2 and "training folder not found" in r.stderr
    r = subprocess.run([sys.executable, "-m", "sr", "train", "--rescale", "0.8", "1.5",
                        "--out", str(tmp_path)], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 2 and "--rescale factors must lie in (0, 1), got 1.5" in r.stderr
    r = subprocess.run([sys.executable, "-m", "sr", "train", "--rgb-perm", "2", "--out", str(tmp_path)],
                       cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 2 and "--rgb-perm must lie in [0, 1], got 2.0" in r.stderr
    r = subprocess.run([sys.executable, "-m", "sr", "train", "--loss", "huber", "--out", str(tmp_path)],
                       cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 2 and "argument --loss: invalid choice: 'huber'" in r.stderr
    r = subprocess.run([sys.executable, "-m", "sr", "train", "--amp", "fp16", "--out", str(tmp_path)],
                       cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 2 and "argument --amp: invalid choice: 'fp16'" in r.stderr
    toml.write_text('[train]\namp = "fp16"\n')
    r = subprocess.run([sys.executable, "-m", "sr", "train", "--config", str(toml), "--out", str(tmp_path)],
                       cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 2 and "--amp 'fp16' is not one of: auto, bf16, off" in r.stderr
    assert not (tmp_path / "asa-base-x2").exists()  # refused before anything was written


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed unavailable")
def test_ddp_two_processes_on_cpu(tmp_path):
    cfg = tiny_config(tmp_path, steps=6, val=[])
    env = {**os.environ, "OMP_NUM_THREADS": "1"}

    def torchrun(name: str, *extra: str) -> subprocess.CompletedProcess:
        port = free_port()  # a free loopback port for the rendezvous
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_addr=127.0.0.1",
               f"--master_port={port}",
               "-m", "sr", "train", "--name", name, "--preset", "asa-small", "--patch", "16", "--batch", "2",
               "--steps", "6", "--train", *cfg.train, "--val", "--out", cfg.out, "--cache", cfg.cache,
               "--log-every", "2", "--threads", "1", "--device", "cpu", *extra]
        return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env, timeout=300)

    r = torchrun("ddp")
    assert r.returncode == 0, r.stderr[-8000:]
    log = read_log(Path(cfg.out) / "ddp")
    assert log[0]["world"] == 2 and [x["step"] for x in log if "loss" in x] == [2, 4, 6]
    # a time limit under DDP: the ranks agree to stop at one step (else the run would hang)
    timed = torchrun("ddp-timed", "--time-limit", "1e-6")
    assert timed.returncode == 0, timed.stderr[-8000:]
    assert "time limit of 1e-06 min reached: stopped at step 1" in timed.stderr
    assert torch.load(Path(cfg.out) / "ddp-timed" / "last.pt", weights_only=False)["step"] == 1


def test_torchrun_with_more_processes_than_gpus_is_a_clear_error(tmp_path, monkeypatch):
    from sr.train import distributed

    monkeypatch.setattr(distributed, "resolve_device", lambda name: torch.device("cuda"))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    with pytest.raises(ValueError, match="process 1 has no GPU of its own .1 CUDA device"):
        Trainer(tiny_config(tmp_path, device="cuda", val=[]))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_run_stops_resumes_and_exports(tmp_path):
    cfg = tiny_config(tmp_path, device="cuda", steps=12, val_every=6)
    Trainer(cfg).fit(stop_at=6)
    Trainer(cfg, resume=True).fit()  # the checkpoint's CPU RNG state must stay on the CPU
    log = read_log(cfg.run_dir)
    assert [r["device"] for r in log if r.get("event") == "start"] == ["cuda", "cuda"]
    assert [r["step"] for r in log if r.get("event") == "val"] == [6, 12]
    assert all(math.isfinite(r["loss"]) for r in log if "loss" in r)
    out = tmp_path / "w.safetensors"
    r = export_checkpoint(cfg.run_dir / "best.pt", out)
    assert r.returncode == 0, r.stderr
    model, _ = load_weights(out)  # CUDA-trained weights load on the CPU
    assert model(torch.rand(1, 3, 16, 16)).shape == (1, 3, 32, 32)


def test_ema_update_moves_each_weight_toward_the_model_and_copies_buffers():
    from sr.train.learner import ema_update

    model, ema = torch.nn.BatchNorm1d(3), torch.nn.BatchNorm1d(3)
    with torch.no_grad():
        model.weight.fill_(2.0)
        ema.weight.fill_(1.0)
        model.running_mean.fill_(5.0)
    ema_update(ema, model, decay=0.75)
    assert torch.allclose(ema.weight, torch.full((3,), 1.25))  # 0.75 * 1 + 0.25 * 2
    assert torch.equal(ema.running_mean, model.running_mean)
    with pytest.raises(ValueError, match="differ"):
        ema_update(torch.nn.Linear(2, 2, bias=False), torch.nn.Linear(2, 2), decay=0.5)


def test_cpu_threads_follow_the_usable_cpus_not_the_machine(monkeypatch):
    from sr.train import distributed

    monkeypatch.setattr(distributed.os, "cpu_count", lambda: 64)  # the machine has 64 cores ...
    monkeypatch.setattr("sr.inference.devices.os.sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert distributed.cpu_threads(0, 1) == 2  # ... but this process may run on two of them
    assert distributed.cpu_threads(0, 2) == 1 and distributed.cpu_threads(0, 4) == 1
    assert distributed.cpu_threads(3, 2) == 3  # an explicit --threads wins


def test_cpu_budget_stops_with_checkpoint_and_a_resume_within_it_does_nothing(tmp_path, capsys):
    trainer = Trainer(tiny_config(tmp_path, steps=40, val_every=20, cpu_hours=1e-9))  # 3.6 microseconds
    trainer.fit()
    assert "CPU budget of 1e-09 h reached: stopped at step 1" in capsys.readouterr().err
    ckpt = torch.load(trainer.run_dir / "last.pt", weights_only=False)
    assert ckpt["step"] == 1 and ckpt["cpu_elapsed"] > 0
    assert [r["step"] for r in read_log(trainer.run_dir) if r.get("event") == "val"] == [1]
    again = Trainer(tiny_config(tmp_path, steps=40, val_every=20, cpu_hours=1e-9), resume=True)
    again.fit()
    assert again.step == 1 and "CPU budget of 1e-09 h is spent" in capsys.readouterr().err
    # a larger budget
    more = Trainer(tiny_config(tmp_path, steps=6, val_every=20, cpu_hours=1.0), resume=True)
    more.fit()
    assert more.step == 6 and more.progress.cpu_elapsed > ckpt["cpu_elapsed"]
    logged = [r["cpu_seconds"] for r in read_log(trainer.run_dir) if "cpu_seconds" in r]
    assert logged == sorted(logged) and logged[-1] <= more.progress.cpu_elapsed + 0.1


def test_with_a_cpu_budget_the_cosine_follows_cpu_time_not_steps():
    cfg = load_config(None, lr=1e-3, min_lr=1e-6, warmup=10, steps=1000, cpu_hours=1.0)
    assert lr_at(5, cfg, cpu_seconds=3000.0) == pytest.approx(6e-4)  # warm-up still counts steps
    assert lr_at(500, cfg, cpu_seconds=0.0) == pytest.approx(1e-3)
    assert lr_at(20, cfg, cpu_seconds=1800.0) == pytest.approx((1e-3 + 1e-6) / 2, rel=1e-6)
    assert lr_at(20, cfg, cpu_seconds=9000.0) == pytest.approx(1e-6)


def _resblocks(model) -> list[dict]:
    return [layer.state_dict() for layer in model.body if not hasattr(layer, "attend")]


@pytest.mark.parametrize("kind", ["none", "window", "adaptive"])
def test_init_carries_the_conv_layers_across_attention_kinds_by_their_order(tmp_path, kind):
    # asa-small's body is R R R A R R R A: in a conv-only network the same residual blocks are body.0-5,
    # so matching by name alone would have copied nothing into body.3-5 and mixed the rest
    src = build_model("asa-small-x2")
    for p in src.parameters():
        torch.nn.init.normal_(p, std=0.1)
    path = tmp_path / "src.pt"
    torch.save({"ema": src.state_dict()}, path)
    from sr.train.init_weights import load_init

    dst = build_model("asa-small-x2", attention=kind)
    fresh = load_init(dst, str(path), layers="conv")
    for got, want in zip(_resblocks(dst), _resblocks(src), strict=True):
        for name, tensor in want.items():
            torch.testing.assert_close(got[name], tensor, rtol=0, atol=0)
    for name in ("head.weight", "body_tail.weight", "upsample.weight"):
        torch.testing.assert_close(dst.state_dict()[name], src.state_dict()[name], rtol=0, atol=0)
    attention = [m for m in dst.body if hasattr(m, "attend")]
    assert all(k.split(".")[1] in {str(i) for i, m in enumerate(dst.body) if hasattr(m, "attend")}
               for k in fresh)
    for block in attention:  # fresh and near-zero (not the source's), yet not exactly zero: all train
        assert 0 < block.proj.weight.abs().max() < 0.05
    if kind == "adaptive":  # layers="all" copies the attention blocks too
        load_init(dst, str(path), layers="all")
        torch.testing.assert_close(dst.state_dict(), src.state_dict(), rtol=0, atol=0)


def test_a_conv_only_init_is_no_continuation_of_the_weights_lineage(tmp_path):
    from sr.train.init_weights import init_lineage

    model = build_model("asa-base-x4")
    shipped = str(REPO / "weights" / "asa-base-x4.safetensors")
    assert init_lineage(shipped, model)["continues"]
    assert not init_lineage(shipped, model, layers="conv")["continues"]


# -- degraded input: a seeded pool of degraded patches, validation on degraded LR folders --


def test_degraded_training_draws_a_cached_pool_and_logs_it(tmp_path):
    from sr.data.degrade import training_config
    from sr.data.pool import build_pool
    from sr.train.loop import training_pairs

    # (patch 8 + 2 x 12 LR margin) x 2 = 64 px: the 72 px textures hold a patch with its margins
    cfg = tiny_config(tmp_path, degrade="photo", pool=16, patch=8, steps=6, val_every=6, log_every=3)
    Trainer(cfg).fit()
    log = read_log(cfg.run_dir)
    start = next(r for r in log if r.get("event") == "start")
    assert start["degrade"] == "photo" and start["pool"] == 16 and start["images"] == 16
    assert 0 <= start["pool_clean_share"] <= 1 and start["skipped_small"] == 0
    steps = [r for r in log if "loss" in r]
    assert [r["step"] for r in steps] == [3, 6] and all(math.isfinite(r["loss"]) for r in steps)
    assert all(0 <= r["data_share"] <= 1 for r in steps)
    assert [r["step"] for r in log if r.get("event") == "val"] == [6]
    assert len(list(Path(cfg.cache).glob("pool-*.npy"))) == 1  # made once, cached
    assert json.loads((cfg.run_dir / "config.json").read_text())["degrade"] == "photo"
    # what the run trains on: the pool's (HR, LR) patch pairs, LR exactly one patch
    pairs, info = training_pairs(cfg)
    ref, _ = build_pool(cfg.train, 2, 8, 16, cfg.seed, training_config("photo"), cfg.cache)
    assert info["pool_clean_share"] == start["pool_clean_share"]
    for (h, lr), (rh, rl) in zip(pairs, ref, strict=True):
        assert h.shape == (16, 16, 3) and lr.shape == (8, 8, 3)
        np.testing.assert_array_equal(h, rh)
        np.testing.assert_array_equal(lr, rl)
    with pytest.raises(ValueError, match="unknown degradation 'nope'"):
        Trainer(tiny_config(tmp_path / "bad", degrade="nope"))


def test_validation_on_val_lr_folders_scores_their_files(tmp_path):
    from sr.evaluation import model_upscaler, plan_sets, score_pairs
    from sr.evaluation.degraded import build_degraded_set, set_folder_name
    from sr.train.validation import validate

    val = textures(tmp_path / "val", n=2, size=48, seed=1)  # the folder tiny_config makes
    lr_dir = tmp_path / "degraded" / set_folder_name(val, "mild", 2)
    build_degraded_set(val, lr_dir, 2, "mild")
    cfg = tiny_config(tmp_path, steps=2, val_every=2, log_every=1, val_lr=[str(lr_dir)])
    trainer = Trainer(cfg)
    name = set_name(lr_dir)  # the set goes by its LR folder's name: one HR folder, several degradations
    results = validate(trainer.ema, cfg, torch.device("cpu"))
    (plan,) = plan_sets([str(val)], [str(lr_dir)], 2)
    scores = [(p, s) for _, _, p, s, _ in score_pairs(plan, model_upscaler(trainer.ema), 2)]
    assert list(results) == [name]
    assert results[name]["psnr"] == pytest.approx(np.mean([p for p, _ in scores]), abs=1e-9)
    assert results[name]["ssim"] == pytest.approx(np.mean([s for _, s in scores]), abs=1e-9)
    clean = validate(trainer.ema, tiny_config(tmp_path, steps=2), torch.device("cpu"))
    assert clean[set_name(val)]["psnr"] > results[name]["psnr"]  # the degraded LR is harder
    trainer.fit()
    (rec,) = [r for r in read_log(cfg.run_dir) if r.get("event") == "val"]
    assert math.isfinite(rec[f"{name}_psnr"]) and rec["step"] == 2


def test_val_lr_needs_one_folder_per_val_folder(tmp_path):
    message = r"--val-lr needs one folder per --val folder \(1 --val, 2 --val-lr\)"
    with pytest.raises(ValueError, match=message):
        Trainer(tiny_config(tmp_path, val_lr=[str(tmp_path / "a"), str(tmp_path / "b")]))
    with pytest.raises(ValueError, match=r"\(0 --val, 1 --val-lr\)"):
        Trainer(tiny_config(tmp_path, val=[], val_lr=[str(tmp_path / "a")]))
