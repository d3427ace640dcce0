"""What a family engine runs, found from metadata: its descriptors by scale, the partners a denoise or
look blends with, the pre model; and each scale's tensors, read when its network is first loaded.

Everything here is found once, when the engine is built, so a model that cannot run (missing, corrupt
metadata, a blend partner lacking a scale, a bf16 refusal) fails there, with the same sentence
whichever caller built the engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .. import weights as sr_weights
from ..descriptor import ModelDescriptor
from ..families import Family, blend_family
from .errors import UpscaleError
from .precision import record_name


def find_weights(
    model: str | Path | ModelDescriptor, weights_dir: Path
) -> tuple[str, dict[int, ModelDescriptor]]:
    """(name, descriptors by scale) of an upscaling model (metadata only: tensors are read on first use)."""
    if isinstance(model, ModelDescriptor):
        name, found = model.name, {model.scale: model}
    else:
        try:
            name, found = sr_weights.find_models(model, weights_dir)
        except sr_weights.WeightsError as e:
            raise UpscaleError(str(e)) from None
    for desc in found.values():
        if desc.purpose != "upscale":
            raise UpscaleError(f"{desc.name} is a 1x restoration model ({desc.architecture}): pass it "
                               "as --pre (pre= in the service), to run before an upscaling model")
    return name, found


def find_pre(pre: str | Path | ModelDescriptor, weights_dir: Path, precision: str) -> ModelDescriptor:
    """The ``pre`` model's descriptor: one file of a 1x restoration model that runs in ``precision``."""
    if isinstance(pre, ModelDescriptor):
        desc = pre
    else:
        try:
            found = sr_weights.find_models(pre, weights_dir)[1]
        except sr_weights.WeightsError as e:
            raise UpscaleError(f"pre: {e}") from None
        if len(found) != 1:
            raise UpscaleError(f"pre: {pre} names a family of {len(found)} models; give one 1x file")
        desc = next(iter(found.values()))
    if desc.purpose != "restore":
        raise UpscaleError(f"pre: {desc.name} is a x{desc.scale} upscaling model; pre takes a 1x "
                           "restoration model (denoise, de-JPEG, deblur)")
    if precision == "bf16" and not desc.supports_bf16:
        raise UpscaleError(f"pre: {desc.architecture} does not run in bf16 (spandrel says so); use "
                           "--precision auto or fp32")
    return desc


def read_tensors(desc: ModelDescriptor) -> ModelDescriptor:
    """``desc`` with its network read from its file (UpscaleError when the file is unreadable)."""
    try:
        return sr_weights.loaded(desc)
    except sr_weights.WeightsError as e:
        raise UpscaleError(str(e)) from None


@dataclass(frozen=True)
class FamilyWeights:
    """One family engine's weights, by scale: its own files, and where ``denoise`` or ``look`` blend
    them, the partner files (:mod:`sr.families` says which family blends with which)."""

    name: str
    descriptors: dict[int, ModelDescriptor]  # the scales the engine runs
    denoise: float | None
    look: float | None
    rules: Family | None  # photo's blend rules for photo and photo-x2; None for other models
    blend_base: dict[int, ModelDescriptor]  # denoise < 1: the default family, by scale (else empty)
    natural: dict[int, ModelDescriptor]  # look > 0 (and denoise > 0): photo-natural, by scale (else empty)
    pre: ModelDescriptor | None  # a 1x restoration model run before the passes

    @classmethod
    def find(
        cls, model: str | Path | ModelDescriptor, weights_dir: Path, *, denoise: float | None,
        look: float | None, precision: str, scales: list[int] | None,
        pre: str | Path | ModelDescriptor | None,
    ) -> FamilyWeights:
        """Find everything ``model`` runs with (metadata only); UpscaleError saying what is missing.
        ``scales``: keep only these of the model's scales (None: all)."""
        name, found = find_weights(model, weights_dir)
        # the engine already refused a denoise or look that this model does not take
        rules = blend_family(model)
        blend_base: dict[int, ModelDescriptor] = {}
        if denoise is not None and denoise != 1 and rules is not None:
            base_name = rules.denoise_base
            _, blend_base = find_weights(base_name, weights_dir)
            missing = sorted(set(found) - set(blend_base))
            if missing:
                raise UpscaleError(f"denoise blends {name} with {base_name}, which has no "
                                   f"x{', x'.join(map(str, missing))} model")
        natural: dict[int, ModelDescriptor] = {}
        if look and denoise != 0 and rules is not None:  # at D = 0 the weights are the base's alone
            try:
                natural = find_weights(rules.look_with, weights_dir)[1]
            except UpscaleError as e:
                raise UpscaleError(f"look blends {name} with {rules.look_with}: {e}") from None
        keep = set(found) if scales is None else set(scales)
        descriptors = {s: d for s, d in found.items() if s in keep}
        for desc in descriptors.values():
            if precision == "bf16" and not desc.supports_bf16:
                raise UpscaleError(f"{desc.name}: {desc.architecture} does not run in bf16 (spandrel says "
                                   "so); use --precision auto or fp32")
        pre_desc = find_pre(pre, weights_dir, precision) if pre is not None else None
        return cls(name, descriptors, denoise, look, rules, blend_base, natural, pre_desc)

    @property
    def k_max(self) -> float | None:
        """The most key regions any pixel may attend to over the scales; None without adaptive attention."""
        values = [d.k_max for d in self.descriptors.values() if d.k_max is not None]
        return max(values) if values else None

    def descriptor(self, scale: int) -> ModelDescriptor:
        """The ``scale`` network's file (1: the pre model's)."""
        if scale == 1 and self.pre is not None:
            return self.pre
        return self.descriptors[scale]

    def tensors(self, scale: int) -> ModelDescriptor:
        """The ``scale`` descriptor with its tensors: the file's, or the denoise/look blend's."""
        desc = self.descriptors[scale]
        try:
            if self.natural:  # cached per (scale, look[, denoise]) by sr.weights
                return sr_weights.load_look(desc, self.natural[scale], self.look,
                                            base=self.blend_base.get(scale), denoise=self.denoise,
                                            name=self._blend_name(desc))
            if self.blend_base:  # cached per (scale, denoise) by sr.weights
                return sr_weights.load_blend(self.blend_base[scale], desc, self.denoise,
                                             name=self._blend_name(desc))
            return sr_weights.loaded(desc)
        except sr_weights.WeightsError as e:
            raise UpscaleError(str(e)) from None

    def model_name(self, scale: int) -> str:
        """The name the ``scale`` network runs under: the file's, or the blend's (photo-x2@look=0.5)."""
        desc = self.descriptors[scale]
        return self._blend_name(desc) if self.natural or self.blend_base else desc.name

    def _blend_name(self, desc: ModelDescriptor) -> str:
        """A blend's name, as -v and the service's X-Model show it: photo-x2@denoise=0.5,
        photo-x2@look=0.5, photo-x2@denoise=0.5,look=0.25."""
        parts = []
        if self.blend_base:
            parts.append(f"denoise={self.denoise:g}")
        if self.natural:
            parts.append(f"look={self.look:g}")
        return f"{desc.name}@{','.join(parts)}"

    def check_look(self, passes: list[int]) -> None:
        """UpscaleError when a pass needs a scale photo-natural lacks (look blends at every pass)."""
        missing = sorted(set(passes) - set(self.natural)) if self.natural else []
        if missing:
            assert self.rules is not None  # only a family with blend rules has a natural partner
            have = ", ".join(f"x{s}" for s in sorted(self.natural))
            raise UpscaleError(f"{self.rules.look_with} has no x{missing[0]} weights: look {self.look:g} "
                               f"needs them (it has {have}; look 0 runs {self.rules.name} at every scale)")

    def record_names(self, scale: int, shipped_dir: str | Path | None) -> list[str]:
        """The files whose bf16 record decides whether the ``scale`` network may run in bf16: one file's
        own, or for a blend of several the blend's measured one (sr.inference.precision); a blend that
        is one file's tensors exactly (L = 1: photo-natural's; D = 0: the default family's) asks that
        file's record alone."""
        names = [record_name(self.descriptors[scale], shipped_dir)]
        if scale in self.natural:
            natural = record_name(self.natural[scale], shipped_dir)
            names = [natural] if self.look == 1 else [*names, natural]
        if self.blend_base:
            base = record_name(self.blend_base[scale], shipped_dir)
            names = [base] if self.denoise == 0 else [*names, base]
        return names
