"""Training patches read from a folder of HR images by DataLoader workers (full-scale sets such as DIV2K).

Each sample (one patch of one image, addressed by ``contrasuite.domains.image_loading``) reads its HR
image, makes the LR by MATLAB bicubic degradation (:func:`~contrasuite.domains.super_resolution.data.degrade`,
the same as the in-memory sampler) or reads it from ``config.data.train_lr_folder`` (same file names),
takes an aligned LR crop of ``patch`` pixels and the HR crop ``scale`` times larger at the same place,
and applies one of the 8 flips/rotations to both: albumentations' ``D4`` with the HR as a paired target.
Every random choice comes from the sample's own seed, so the batches do not depend on the workers.
Images too small for a patch are found from their headers when the dataset is made, and left out as
:func:`~contrasuite.domains.super_resolution.data.usable_images` says (a DataError naming the folder if none fits).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

from contrasuite.domains.image_loading import sample_seed
from contrasuite.domains.images import image_size, read_rgb_array
from contrasuite.domains.super_resolution.data import degrade, modcrop, to_stderr, usable_images


class FolderPatches(Dataset):
    """``dataset[(epoch, position, index)] -> (lr uint8 [3, p, p], hr uint8 [3, s p, s p])``."""

    def __init__(self, hr_paths: Sequence[Path], scale: int, patch: int, seed: int, lr_folder: Path | None = None,
                 log: Callable[[str], None] = to_stderr) -> None:
        import os

        os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")
        import albumentations as A

        self.paths = _usable_paths(list(hr_paths), scale, patch, log)
        self.scale, self.patch, self.seed, self.lr_folder = scale, patch, seed, lr_folder
        self.dihedral = A.Compose([A.D4(p=1.0)], additional_targets={"hr": "image"}, seed=0, is_check_shapes=False)

    def __len__(self) -> int:
        return len(self.paths)

    def _pair(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        path = self.paths[index]
        hr = modcrop(torch.from_numpy(read_rgb_array(path)).permute(2, 0, 1), self.scale)
        if self.lr_folder is not None:
            lr = torch.from_numpy(read_rgb_array(self.lr_folder / path.name)).permute(2, 0, 1)
            expected = (hr.shape[-2] // self.scale, hr.shape[-1] // self.scale)
            if tuple(lr.shape[-2:]) != expected:
                raise ValueError(f"{self.lr_folder / path.name}: LR {tuple(lr.shape[-2:])}, expected {expected} for x{self.scale}")
        else:
            lr = (degrade(hr.float() / 255.0, self.scale) * 255.0).round().to(torch.uint8)
        return lr.permute(1, 2, 0).numpy(), hr.permute(1, 2, 0).numpy()

    def __getitem__(self, key: tuple[int, int, int]) -> tuple[Tensor, Tensor]:
        epoch, position, index = key
        seed = sample_seed(self.seed, epoch, position)
        lr, hr = self._pair(index)
        p, s = self.patch, self.scale
        rng = np.random.default_rng(seed)
        y, x = int(rng.integers(lr.shape[0] - p + 1)), int(rng.integers(lr.shape[1] - p + 1))
        lr, hr = lr[y : y + p, x : x + p], hr[y * s : (y + p) * s, x * s : (x + p) * s]
        self.dihedral.set_random_seed(seed)
        out = self.dihedral(image=np.ascontiguousarray(lr), hr=np.ascontiguousarray(hr))
        return (torch.from_numpy(np.ascontiguousarray(out["image"])).permute(2, 0, 1),
                torch.from_numpy(np.ascontiguousarray(out["hr"])).permute(2, 0, 1))


def _usable_paths(paths: list[Path], scale: int, patch: int, log: Callable[[str], None]) -> list[Path]:
    """The HR images of ``paths`` large enough for a patch (:func:`usable_images`, read from their headers)."""
    sizes = [image_size(path)[::-1] for path in paths]
    source = f"config.data.train_folder {paths[0].parent}" if paths else "config.data.train_folder"
    return [paths[i] for i in usable_images(sizes, source, scale, patch, [str(p) for p in paths], log)]
