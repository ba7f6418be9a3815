"""Negative images that depict a negative caption.

* :class:`KorniaEditor` realises the emoji edits exactly with kornia operations: a horizontal or
  vertical flip for ``change_direction`` and a hue rotation for ``replace_colour`` between two
  chromatic colours, so each edited image has a known true caption (the negative caption).
* :class:`DiffusionEditor` inpaints an image with a diffusers image-editing pipeline loaded from a
  local folder (Stable Diffusion inpainting in GNM, Sahin et al., WACV 2024), prompted with the
  negative caption; fp16 on CUDA, fp32 on the CPU.

:func:`is_false_negative_image` drops edits that leave the image (nearly) unchanged: a flipped
symmetric glyph or a hue rotation of a grey image still depicts the source caption.
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

HUES = {"red": 0.0, "orange": 30.0, "yellow": 55.0, "green": 120.0, "light blue": 195.0, "blue": 220.0,
        "purple": 275.0}
"""HSV hue (degrees) of each colour a hue rotation can reach; pink, brown, grey, black and white cannot."""


def to_tensor(images: np.ndarray) -> Tensor:
    """``[N, H, W, 3]`` uint8 -> ``[N, 3, H, W]`` float in [0, 1]."""
    return torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).float() / 255.0


def to_uint8(images: Tensor) -> np.ndarray:
    """``[N, 3, H, W]`` float in [0, 1] -> ``[N, H, W, 3]`` uint8."""
    return (images.clamp(0, 1) * 255).round().to(torch.uint8).permute(0, 2, 3, 1).numpy()


def chromatic_mask(image: Tensor, min_saturation: float = 0.35, min_value: float = 0.25) -> Tensor:
    """``[H, W]`` bool: pixels with a meaningful hue (saturated and not dark) of one ``[3, H, W]`` image."""
    hsv = kornia.color.rgb_to_hsv(image[None])[0]
    return (hsv[1] > min_saturation) & (hsv[2] > min_value)


def dominant_hue(image: Tensor) -> float | None:
    """Circular mean hue (radians) of the chromatic pixels of ``[3, H, W]``; ``None`` if there are none."""
    mask = chromatic_mask(image)
    if not mask.any():
        return None
    hue = kornia.color.rgb_to_hsv(image[None])[0, 0][mask]
    return float(torch.atan2(hue.sin().mean(), hue.cos().mean()))


def rotate_hue_to(image: Tensor, target_degrees: float) -> Tensor:
    """Rotate the hue of ``[3, H, W]`` so its dominant hue lands on ``target_degrees``; grey pixels unchanged."""
    source = dominant_hue(image)
    if source is None:
        return image.clone()
    shift = math.remainder(math.radians(target_degrees) - source, 2 * math.pi)
    return kornia.enhance.adjust_hue(image[None], shift)[0]


def is_false_negative_image(original: Tensor, edited: Tensor, min_change: float = 0.02,
                            min_chromatic: float = 0.05, kind: str = "flip") -> bool:
    """True if the edit may still depict the source caption: mean absolute change below ``min_change``
    (a symmetric glyph, a grey image), or for a hue edit fewer than ``min_chromatic`` coloured pixels."""
    if (edited - original).abs().mean() < min_change:
        return True
    return kind == "hue" and float(chromatic_mask(original).float().mean()) < min_chromatic


@dataclass
class KorniaEditor:
    """Exact emoji edits: ``{"flip": "horizontal"|"vertical"}`` or ``{"hue": [from_colour, to_colour]}``."""

    min_change: float = 0.02
    min_chromatic: float = 0.05

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
            kind = "flip"
        else:
            edited, kind = rotate_hue_to(image, HUES[edit["hue"][1]]), "hue"
        if is_false_negative_image(image, edited, self.min_change, self.min_chromatic, kind):
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
