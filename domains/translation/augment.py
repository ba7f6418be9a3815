"""Differentiable augmentation of the discriminator's inputs (DiffAugment: Zhao, Liu, Lin, Zhu, Han,
"Differentiable Augmentation for Data-Efficient GAN Training", NeurIPS 2020; not in CUT).

The same random transform family is applied to real and generated images wherever the
discriminator sees them (its own step and the generator's), so the discriminator cannot tell the
domains apart by what the transforms randomise, and the generator's gradient flows back through them.
On small training sets (the emoji styles have about 1,600 images each) this keeps the discriminator
from memorising its real images. Policies (kornia operations on ``[0, 1]`` images, each image drawn
independently):

* ``colour``: DiffAugment's colour policy -- brightness ``+U(-0.25, 0.25)`` (their ``+-0.5`` on
  ``[-1, 1]``), saturation ``x U(0, 2)``, contrast ``x U(0.5, 1.5)``;
* ``hue``: a hue rotation by ``U(-pi, pi)`` (not in DiffAugment): the discriminator can no longer
  judge palettes, only shape and shading;
* ``translation``: a shift by up to 1/8 of the side, edges replicated;
* ``cutout``: a random square of half the side set to grey.
"""

from __future__ import annotations

from typing import Sequence

from torch import Tensor, nn

from contrasuite.core.numerics import full_precision

from contrasuite.core.task.errors import ConfigValueError

POLICIES = ("colour", "hue", "translation", "cutout")


def _policy(name: str) -> nn.Module:
    import kornia.augmentation as K

    if name == "colour":
        return K.ColorJiggle(brightness=(0.75, 1.25), contrast=(0.5, 1.5), saturation=(0.0, 2.0), p=1.0)
    if name == "hue":
        return K.ColorJiggle(hue=(-0.5, 0.5), p=1.0)
    if name == "translation":
        return K.RandomAffine(degrees=0.0, translate=(0.125, 0.125), padding_mode="border", p=1.0)
    return K.RandomErasing(scale=(0.25, 0.25), ratio=(1.0, 1.0), value=0.5, p=1.0)


class DiffAugment(nn.Module):
    """``x [B, 3, H, W]`` in ``[-1, 1]`` -> the same, each policy of ``policies`` applied in turn, in fp32."""

    def __init__(self, policies: Sequence[str]) -> None:
        super().__init__()
        unknown = [p for p in policies if p not in POLICIES]
        if unknown:
            raise ConfigValueError(f"config.discriminator.augment: unknown policies {unknown}; choose from {POLICIES}")
        self.ops = nn.ModuleList(_policy(p) for p in policies)

    def forward(self, x: Tensor) -> Tensor:
        if not self.ops:
            return x
        with full_precision(x):
            y = (x.float() + 1.0) * 0.5
            for op in self.ops:
                y = op(y)
            return y.clamp(0.0, 1.0) * 2.0 - 1.0
