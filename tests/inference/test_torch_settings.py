"""An engine leaves the process as it found it: its thread count and backend flags apply around its
own loads and forwards only (sr.inference.devices.torch_settings)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from sr.inference import Upscaler
from sr.inference.devices import torch_settings, usable_cpus
from sr.io import DecodedImage

OPENMP = "parallel backend: OpenMP" in torch.__config__.parallel_info()


def _image(h: int = 50, w: int = 40) -> DecodedImage:
    return DecodedImage(np.random.default_rng(0).random((h, w, 3), dtype=np.float32))


def _threads_seen(up: Upscaler) -> list[int]:
    """The thread count of every forward of ``up``'s x2 network from now on, recorded as it runs."""
    seen: list[int] = []
    up.network(2).register_forward_pre_hook(lambda net, args: seen.append(torch.get_num_threads()))
    return seen


def test_building_engines_leaves_the_process_thread_count(tiny_x2):
    before = torch.get_num_threads()
    a = Upscaler(tiny_x2, device="cpu", threads=1)
    assert torch.get_num_threads() == before
    default = Upscaler(tiny_x2, device="cpu")  # one per usable CPU, from the process's count
    assert default.threads == min(before, usable_cpus())
    c = Upscaler(tiny_x2, device="cpu", threads=2)
    assert (a.threads, default.threads, c.threads) == (1, min(before, usable_cpus()), 2)
    assert torch.get_num_threads() == before


def test_each_engine_forwards_with_its_own_thread_count(tiny_x2):
    before = torch.get_num_threads()
    engines = {n: Upscaler(tiny_x2, device="cpu", tile=32, tile_overlap=4, threads=n) for n in (1, 3, 2)}
    for n, up in engines.items():  # run in another order than built: no engine's count lingers
        seen = _threads_seen(up)
        up.upscale(_image())
        assert len(seen) > 1 and set(seen) == {n}  # every tile's forward
        run, _ = up.tile_runner(2)
        with torch.inference_mode():
            run(np.zeros((16, 16, 3), np.float32))
        assert seen[-1] == n
        assert torch.get_num_threads() == before
        assert up.threads == n


def test_auto_runs_both_sides_with_its_thread_count(weights_dir, tmp_path):
    for family in ("asa-base", "photo"):
        (tmp_path / f"{family}-x2.safetensors").symlink_to(weights_dir / "tiny-x2.safetensors")
    before = torch.get_num_threads()
    up = Upscaler("auto", device="cpu", weights_dir=tmp_path, threads=1)
    assert torch.get_num_threads() == before
    seen = {family: _threads_seen(side) for family, side in up.sides.items()}
    lossless, lossy = _image(), DecodedImage(_image().pixels, format="JPEG")
    assert {up.upscale(img).choice.model for img in (lossless, lossy)} == set(up.sides)
    assert all(set(s) == {1} for s in seen.values()) and all(seen.values())
    assert torch.get_num_threads() == before


@pytest.mark.skipif(not OPENMP, reason="torch's thread count is per calling thread in its OpenMP build only")
def test_concurrent_calls_of_two_engines_each_run_with_their_own_count(tiny_x2):
    engines = [Upscaler(tiny_x2, device="cpu", tile=32, tile_overlap=4, threads=n) for n in (1, 2)]
    seen = [_threads_seen(up) for up in engines]
    warm = [0, 0]
    start = threading.Barrier(2)

    def work(i: int) -> None:
        # A thread's first call: sr's native attention kernel starts its thread count from the one
        # torch last set anywhere (see torch_settings); from then on each call runs with its own.
        engines[i].upscale(_image())
        warm[i] = len(seen[i])
        start.wait()
        for _ in range(3):
            engines[i].upscale(_image(70, 60))

    workers = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    assert set(seen[0][warm[0]:]) == {1} and set(seen[1][warm[1]:]) == {2}
    assert len(seen[0]) > warm[0] and len(seen[1]) > warm[1]


def test_cuda_work_runs_without_cudnn_autotuning_and_puts_the_flag_back():
    cudnn = torch.backends.cudnn
    before = cudnn.benchmark
    threads = torch.get_num_threads()
    try:
        cudnn.benchmark = True  # as a trainer in the same process sets it
        with torch_settings(torch.device("cuda"), threads):
            assert cudnn.benchmark is False
            with torch_settings(torch.device("cuda"), threads):  # a second call at the same time
                assert cudnn.benchmark is False
            assert cudnn.benchmark is False  # the first call still runs
        assert cudnn.benchmark is True
        with torch_settings(torch.device("cpu"), threads):
            assert cudnn.benchmark is True  # the CPU's work leaves cuDNN alone
        with pytest.raises(RuntimeError, match="boom"), torch_settings(torch.device("cuda"), 1):
            raise RuntimeError("boom")
        assert cudnn.benchmark is True and torch.get_num_threads() == threads  # put back on errors too
    finally:
        cudnn.benchmark = before


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_cuda_engine_leaves_cudnn_autotuning_as_it_found_it(tiny_x2):
    cudnn = torch.backends.cudnn
    before = cudnn.benchmark
    try:
        cudnn.benchmark = True
        up = Upscaler(tiny_x2, device="cuda", tile=None)
        assert cudnn.benchmark is True
        seen: list[bool] = []
        up.network(2).register_forward_pre_hook(lambda net, args: seen.append(cudnn.benchmark))
        up.upscale(_image())
        assert seen and not any(seen)
        assert cudnn.benchmark is True
    finally:
        cudnn.benchmark = before
