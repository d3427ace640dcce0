"""Model files of other architectures (ESRGAN, Real-ESRGAN Compact, SwinIR, HAT, SPAN, DnCNN, ...):
read safely, recognised by spandrel (the optional ``models`` extra), and wrapped so that sr's engine
runs them as it runs its own networks.

- :mod:`sr.external.files`: a file's tensors without running any of its code (safetensors, or a
  pickle read with ``torch.load(weights_only=True)``; TorchScript refused).
- :mod:`sr.external.network`: :class:`ExternalNet`, spandrel's model behind sr's network interface
  (size requirements padded, gray and RGBA models fed RGB).
- :mod:`sr.external.describe`: the :class:`~sr.descriptor.ModelDescriptor` of such a file.
- :mod:`sr.external.bf16_check`: whether bf16 keeps a model's output (first use, cached per file).
"""

from .describe import describe_external, is_model_file

__all__ = ["describe_external", "is_model_file"]
