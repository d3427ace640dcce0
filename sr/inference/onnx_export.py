"""Export a trained network to ONNX, for runtimes without Python or torch (onnxruntime, chaiNNer, TensorRT).

The graph is the static-shape attention path (:func:`sr.models.set_attention_path`): fixed-size
gathers with the budget as a mask, so one graph serves every height and width. The budget is baked
in at its trained value. Input ``input``: float32 (N, 3, H, W) RGB in [0, 1]; output ``output``:
float32 (N, 3, sH, sW), to be clamped to [0, 1] by the caller. N is 1 (torch's exporter drops the
attention's padding when the batch is symbolic too: tested, so fixed); H and W are free from 8 px up:
the network pads internally to its attention grid, by reflection, which needs a few pixels to
reflect (:class:`OnnxNet` pads smaller inputs by edge replication). Routing scores every pooled
region against every other, so memory grows with (H W)^2 / 4096: tile inputs above ~512 px a side.

Needs the optional extra: ``pip install -e ".[onnx]"`` (onnx, onnxscript, onnxruntime).
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

import numpy as np
import torch

from .. import weights as sr_weights
from ..descriptor import ModelDescriptor
from ..io import atomic_write
from ..models import set_attention_path

INPUT_NAME, OUTPUT_NAME = "input", "output"
OPSET = 18
# The size traced for export: any size works (H and W are symbolic); a small one keeps export fast.
TRACE_HW = (64, 96)
MIN_SIDE = 8  # the exported graph's smallest height and width (its reflect padding needs them)
EXTRA_HINT = 'ONNX support needs the optional extra: pip install -e ".[onnx]" (onnx, onnxscript, onnxruntime)'


class OnnxUnavailable(ImportError):
    """onnx / onnxscript / onnxruntime are not installed."""


def _require(module: str):
    try:
        return __import__(module)
    except ImportError:
        raise OnnxUnavailable(f"{module} is not installed. {EXTRA_HINT}") from None


def onnx_metadata(model: ModelDescriptor) -> dict[str, str]:
    """What a runtime needs to know about the graph, stored in the ONNX file's metadata_props."""
    cfg, meta, k_max = model.config, model.meta, model.k_max  # k_max: the variant's own cap, or None
    options = cfg.attn_options or {}
    return {
        "sr_model": model.name,
        "sr_scale": str(model.scale),
        "sr_attention": cfg.attention,
        "sr_budget": str(options.get("budget", "")) if cfg.attention == "adaptive" else "",
        "sr_k_max": "" if k_max is None else f"{k_max:g}",
        "sr_input": "float32 NCHW RGB in [0, 1], any H and W",
        "sr_output": "float32 NCHW RGB, scale x H and W; clamp to [0, 1]",
        "sr_config": json.dumps(cfg.to_dict()),
        "sr_train_data": meta.get("train_data", ""),
        "sr_steps": meta.get("steps", ""),
    }


def export_onnx(weights: str | Path, output: str | Path, opset: int = OPSET) -> Path:
    """Write the network in ``weights`` (a shipped model name or a .safetensors file) to ``output``.

    The file appears atomically (written beside it under a temporary name, then renamed), so a failed
    export leaves nothing behind. Returns the output path.
    """
    _require("onnx")
    _require("onnxscript")
    import onnx

    desc = sr_weights.load_model(weights)
    net = desc.net.eval().requires_grad_(False)
    set_attention_path(net, "static")
    output = Path(output)
    # torch.onnx.export writes to a path: a private scratch file beside the output, never the output
    tmp = output.with_name(f".{output.name}.{os.getpid()}.{secrets.token_hex(4)}.export.tmp")
    height, width = torch.export.Dim("height", min=1), torch.export.Dim("width", min=1)
    try:
        with torch.no_grad():
            torch.onnx.export(
                net, (torch.rand(1, 3, *TRACE_HW),), str(tmp), dynamo=True, opset_version=opset,
                input_names=[INPUT_NAME], output_names=[OUTPUT_NAME],
                dynamic_shapes={"x": {2: height, 3: width}},
                external_data=False, verbose=False,
            )
        model = onnx.load(str(tmp))
        for key, value in onnx_metadata(desc).items():
            model.metadata_props.add(key=key, value=value)
        # one self-contained proto (external_data=False): fsync, rename and cleanup are atomic_write's
        atomic_write(output, model.SerializeToString())
    finally:
        tmp.unlink(missing_ok=True)
    return output


class OnnxNet:
    """An exported network on onnxruntime, called like the torch one: (N, 3, H, W) -> (N, 3, sH, sW)."""

    def __init__(self, path: str | Path, threads: int | None = None) -> None:
        ort = _require("onnxruntime")
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
        try:
            self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception as e:  # noqa: BLE001 - onnxruntime raises its own types for unreadable files
            raise ValueError(f"{path}: not a usable ONNX model ({e})") from None
        props = self.session.get_modelmeta().custom_metadata_map
        if "sr_scale" not in props:
            raise ValueError(f"{path}: not an sr export (no sr_scale in its metadata)")
        self.scale = int(props["sr_scale"])
        self.metadata = dict(props)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """(1, 3, H, W) float32 in [0, 1] -> (1, 3, sH, sW) float32 (not clamped)."""
        h, w = x.shape[-2:]
        ph, pw = max(0, MIN_SIDE - h), max(0, MIN_SIDE - w)
        if ph or pw:  # below the graph's reflect padding minimum: replicate the edges, crop after
            x = np.pad(x, ((0, 0), (0, 0), (0, ph), (0, pw)), mode="edge")
        y = self.session.run([OUTPUT_NAME], {INPUT_NAME: np.ascontiguousarray(x, dtype=np.float32)})[0]
        return y[:, :, : h * self.scale, : w * self.scale]
