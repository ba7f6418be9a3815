"""Negative images that depict a negative caption.

* :class:`KorniaEditor` realises the emoji edits exactly with kornia operations: a horizontal or
  vertical flip for ``change_direction`` and, for ``replace_colour`` between two chromatic colours, a
  hue rotation of the pixels of the named colour only, so each edited image has a known true caption
  (the negative caption).
* :class:`DiffusionEditor` inpaints an image with a diffusers image-editing pipeline loaded from a
  local folder (Stable Diffusion inpainting in GNM, Sahin et al., WACV 2024), prompted with the
  negative caption; fp16 on CUDA, fp32 on the CPU.

:func:`is_false_negative_image` drops edits that leave the image (nearly) unchanged: a flipped
symmetric glyph, or a hue rotation where the named colour is (almost) absent, still depicts the
source caption.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kornia
import numpy as np
import torch
from torch import Tensor

HUES = {"red": 0.0, "orange": 34.0, "yellow": 44.0, "green": 95.0, "light blue": 200.0, "blue": 208.0,
        "purple": 280.0}
"""HSV hue (degrees) of each colour a hue rotation can reach, as drawn in Twemoji and Noto (measured on
their hearts, circles and squares); pink, brown, grey, black and white cannot be reached."""


def to_tensor(images: np.ndarray) -> Tensor:
    """``[N, H, W, 3]`` uint8 -> ``[N, 3, H, W]`` float in [0, 1]."""
    return torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).float() / 255.0


def to_uint8(images: Tensor) -> np.ndarray:
    """``[N, 3, H, W]`` float in [0, 1] -> ``[N, H, W, 3]`` uint8."""
    return (images.clamp(0, 1) * 255).round().to(torch.uint8).permute(0, 2, 3, 1).numpy()


def colour_mask(image: Tensor, hue_degrees: float, window: float = 20.0, min_saturation: float = 0.25,
                min_value: float = 0.25) -> Tensor:
    """``[H, W]`` bool: pixels of ``[3, H, W]`` that show the colour at ``hue_degrees`` (within ``window``
    degrees, saturated and not dark)."""
    hue, sat, val = kornia.color.rgb_to_hsv(image[None])[0]
    distance = torch.remainder(hue - math.radians(hue_degrees) + math.pi, 2 * math.pi) - math.pi
    return (distance.abs() < math.radians(window)) & (sat > min_saturation) & (val > min_value)


def recolour(image: Tensor, source: str, target: str) -> tuple[Tensor, Tensor]:
    """Rotate the hue of the ``source``-coloured pixels of ``[3, H, W]`` so that their mean hue lands on
    ``target``'s; every other pixel (other colours, white, grey) is unchanged. Returns the image and the
    ``[H, W]`` mask of the recoloured pixels."""
    mask = colour_mask(image, HUES[source])
    if not mask.any():
        return image.clone(), mask
    hue = kornia.color.rgb_to_hsv(image[None])[0, 0][mask]
    mean = math.atan2(float(hue.sin().mean()), float(hue.cos().mean()))
    shift = math.remainder(math.radians(HUES[target]) - mean, 2 * math.pi)
    rotated = kornia.enhance.adjust_hue(image[None], shift)[0]
    return torch.where(mask, rotated, image), mask


def is_false_negative_image(original: Tensor, edited: Tensor, min_change: float = 0.02,
                            changed_fraction: float | None = None, min_fraction: float = 0.05) -> bool:
    """True if the edit may still depict the source caption: mean absolute change below ``min_change``
    (a symmetric glyph flipped, a hue rotation to a nearby hue), or for a hue edit fewer than
    ``min_fraction`` of the pixels recoloured (the named colour is not what the image shows)."""
    if (edited - original).abs().mean() < min_change:
        return True
    return changed_fraction is not None and changed_fraction < min_fraction


@dataclass
class KorniaEditor:
    """Exact emoji edits: ``{"flip": "horizontal"|"vertical"}`` or ``{"hue": [from_colour, to_colour]}``."""

    min_change: float = 0.02
    min_fraction: float = 0.05

    def can_edit(self, edit: dict[str, Any] | None) -> bool:
        if not edit:
            return False
        if "flip" in edit:
            return edit["flip"] in ("horizontal", "vertical")
        return "hue" in edit and edit["hue"][0] in HUES and edit["hue"][1] in HUES

    def __call__(self, image: Tensor, edit: dict[str, Any]) -> Tensor | None:
        """The edited ``[3, H, W]`` image in [0, 1], or ``None`` if the edit is impossible or a false negative."""
        if not self.can_edit(edit):
            return None
        if "flip" in edit:
            edited = kornia.geometry.transform.hflip(image) if edit["flip"] == "horizontal" \
                else kornia.geometry.transform.vflip(image)
            fraction = None
        else:
            edited, mask = recolour(image, *edit["hue"])
            fraction = float(mask.float().mean())
        if is_false_negative_image(image, edited, self.min_change, fraction, self.min_fraction):
            return None
        return edited


class DiffusionEditor:
    """Inpaint with a diffusers pipeline saved in a local folder, prompted with the negative caption.

    ``path`` holds a ``StableDiffusionInpaintPipeline`` (``save_pretrained`` layout); it is loaded
    offline in fp16 on CUDA and fp32 on the CPU (fp16 convolutions are not supported there). The mask
    is the non-white region of the image (the object of an emoji) unless one is given.
    """

    def __init__(self, path: str | Path, device: str | torch.device = "auto", steps: int = 30,
                 guidance_scale: float = 7.5, size: int = 512) -> None:
        from diffusers import StableDiffusionInpaintPipeline

        path = Path(path)
        if not (path / "model_index.json").is_file():
            raise FileNotFoundError(f"no diffusers pipeline at {path} (expected model_index.json from save_pretrained)")
        if str(device) == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        dtype = torch.float16 if self.device.type == "cuda" else torch.float32
        self.pipe = StableDiffusionInpaintPipeline.from_pretrained(path, torch_dtype=dtype, local_files_only=True,
                                                                   safety_checker=None, requires_safety_checker=False)
        self.pipe.to(self.device)
        self.pipe.set_progress_bar_config(disable=True)
        self.steps, self.guidance_scale, self.size = steps, guidance_scale, size

    @staticmethod
    def object_mask(image: Tensor, threshold: float = 0.95) -> Tensor:
        """``[1, H, W]`` float: 1 where any channel is below ``threshold`` (not background white)."""
        return (image.min(dim=0, keepdim=True).values < threshold).float()

    @torch.no_grad()
    def __call__(self, image: Tensor, prompt: str, mask: Tensor | None = None, seed: int = 0) -> Tensor:
        """The inpainted ``[3, H, W]`` image in [0, 1], resized back to the input size."""
        height, width = image.shape[-2:]
        mask = self.object_mask(image) if mask is None else mask
        resize = lambda x: torch.nn.functional.interpolate(x[None], size=(self.size, self.size), mode="bilinear")[0]
        generator = torch.Generator(device="cpu").manual_seed(seed)
        out = self.pipe(prompt=prompt, image=resize(image)[None], mask_image=resize(mask)[None],
                        height=self.size, width=self.size, num_inference_steps=self.steps,
                        guidance_scale=self.guidance_scale, generator=generator, output_type="pt").images
        edited = torch.nn.functional.interpolate(out.float().cpu(), size=(height, width), mode="bilinear")[0]
        return mask * edited.clamp(0, 1) + (1 - mask) * image
