"""Issue 23: the EfficientNet-Lite0 networks before (commit 85e4520) and after the shared loader, on real images.

    python docs/domains/efficientnet_lite0_before_after.py      # about 5 min on one CPU thread; needs git and timm

1. ImageNet top-5 of real photos (Set5/Set14 and the Etretat photo of the shared data) in the shared
   network and in timm's ``efficientnet_lite0`` as image_text (ImageNet mean/std) and translation
   ((x - 127) / 128) used it.
2. translation: FD/KID between 200 Twemoji and the same 200 emoji in Noto (and 200 other Noto emoji),
   old and new network, at 160 px (the reduced configs) and 224 px (the default); the features'
   relative difference.
3. image_text: the frozen trunk's cross-style retrieval (Twemoji query -> the same emoji in Noto,
   cosine on the cached 2 x 2 grid and on the pooled features), old and new.
4. metric_learning: the old own backbone against the shared network (expected: identical).
The numbers are in docs/domains/{translation,image_text,metric_learning}.md.
"""

import importlib.util
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from contrasuite.domains.archives import cache_root, emoji_style_dirs
from contrasuite.domains.efficientnet_lite0 import efficientnet_lite0, normalize
from contrasuite.domains.metric_learning.images import normalize as metric_normalize
from contrasuite.domains.metric_learning.model import EmbeddingNet
from contrasuite.domains.translation import data as D
from contrasuite.domains.translation.metrics import distribution_metrics, extract_features, feature_network

BEFORE = "85e4520"
ROOT = Path(__file__).resolve().parents[2]
DATA = Path(os.environ.get("CONTRASUITE_DATA", ROOT.parent / "shared" / "data"))
PHOTOS = [("sr/Set14.tar.gz", f"Set14/{n}.png") for n in ("zebra", "monarch", "pepper", "baboon", "coastguard")] + \
         [("sr/Set5.tar.gz", f"Set5/{n}.png") for n in ("butterfly", "bird", "baby")] + \
         [("translation/single_image_monet_etretat/trainB/etretat-normandy-france.jpg", None)]


def old_module(name: str, path: str):
    """``path`` as it was at :data:`BEFORE`, imported as ``name``."""
    source = subprocess.run(["git", "show", f"{BEFORE}:{path}"], cwd=ROOT, check=True, capture_output=True).stdout
    file = Path(tempfile.mkdtemp()) / f"{name}.py"
    file.write_bytes(source)
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def photo(source: str, member: str | None, size: int = 224) -> torch.Tensor:
    if member is None:
        image = Image.open(DATA / source)
    else:
        with tarfile.open(DATA / source) as archive:
            image = Image.open(io.BytesIO(archive.extractfile(member).read()))
    side, (w, h) = round(size / 0.875), image.size
    scale = side / min(w, h)
    image = image.convert("RGB").resize((max(side, round(w * scale)), max(side, round(h * scale))), Image.BICUBIC)
    w, h = image.size
    left, top = (w - size) // 2, (h - size) // 2
    return torch.from_numpy(np.array(image.crop((left, top, left + size, top + size)))).permute(2, 0, 1).float() / 255


def top5(logits: torch.Tensor, labels) -> list[str]:
    p, i = logits.softmax(-1).topk(5)
    return [", ".join(f"{labels(int(k))} {float(q):.2f}" for q, k in zip(pr, ir)) for pr, ir in zip(p, i)]


def r1(query: torch.Tensor, gallery: torch.Tensor) -> float:
    q, g = F.normalize(query.flatten(1), dim=1), F.normalize(gallery.flatten(1), dim=1)
    return 100.0 * float(((q @ g.T).argmax(1) == torch.arange(len(q))).float().mean())


@torch.no_grad()
def main() -> None:
    import timm
    from timm.data import ImageNetInfo

    torch.set_num_threads(1)
    old_translation = old_module("old_translation_metrics", "domains/translation/metrics.py")
    old_image_text = old_module("old_image_text_models", "domains/image_text/models.py")
    old_backbone = old_module("old_metric_backbone", "domains/metric_learning/backbone.py")
    out: dict = {}

    # 1. photos
    info = ImageNetInfo()
    labels = lambda k: info.index_to_description(k).split(",")[0]  # noqa: E731
    x = torch.stack([photo(*p) for p in PHOTOS])
    new = efficientnet_lite0(with_classifier=True).eval()
    old = timm.create_model("efficientnet_lite0", pretrained=False, num_classes=1000).eval()
    state = torch.load(old_image_text.default_image_weights(), map_location="cpu", weights_only=True)
    old.load_state_dict({n: v for n, v in zip(old.state_dict(), state.values())})
    imagenet = (x - torch.tensor(old_image_text.IMAGENET_MEAN).view(1, 3, 1, 1)) / torch.tensor(old_image_text.IMAGENET_STD).view(1, 3, 1, 1)
    rows = {"new (shared, TF-Lite network)": top5(new.logits(normalize(x)), labels),
            "old image_text (timm, ImageNet mean/std)": top5(old(imagenet), labels),
            "old translation (timm, (x - 127) / 128)": top5(old(normalize(x)), labels)}
    out["photos"] = {Path(m or s).name: {k: v[i] for k, v in rows.items()} for i, (s, m) in enumerate(PHOTOS)}

    # 2. translation FD/KID on real emoji
    dirs = emoji_style_dirs(DATA / "emoji", cache_root(""), ("twitter", "google"))
    names = sorted({p.name for p in dirs["twitter"].glob("*.png")} & {p.name for p in dirs["google"].glob("*.png")})
    pick = [names[i] for i in np.random.default_rng(0).choice(len(names), 400, replace=False)]
    sets = {"A": D.load_stack(dirs["twitter"], pick[:200]), "B": D.load_stack(dirs["google"], pick[:200]),
            "C": D.load_stack(dirs["google"], pick[200:])}
    networks = {"old": (old_translation.efficientnet_lite0_features(None), old_translation.extract_features),
                "new": (feature_network(None), extract_features)}
    for size in (160, 224):
        feats = {k: {s: fn(net, images, size) for s, images in sets.items()} for k, (net, fn) in networks.items()}
        for k, f in feats.items():
            ab, cb = distribution_metrics(f["A"], f["B"], 50), distribution_metrics(f["C"], f["B"], 50)
            out[f"translation {size} px {k}"] = {"FD twitter-noto": round(ab["fd"], 1), "KIDx1000 twitter-noto": round(1000 * ab["kid"], 2),
                                                  "FD noto-noto (other emoji)": round(cb["fd"], 1), "KIDx1000 noto-noto": round(1000 * cb["kid"], 2)}
        rel = np.linalg.norm(feats["old"]["B"] - feats["new"]["B"], axis=1) / np.linalg.norm(feats["new"]["B"], axis=1)
        out[f"translation {size} px relative feature difference"] = round(float(rel.mean()), 3)

    # 3. image_text trunk: 64 -> 128 px bilinear, the final map
    old_trunk = old_image_text.efficientnet_lite0(old_image_text.default_image_weights()).eval()
    new_trunk = efficientnet_lite0().eval()
    mean, std = (torch.tensor(v).view(1, 3, 1, 1) for v in (old_image_text.IMAGENET_MEAN, old_image_text.IMAGENET_STD))
    up = {s: F.interpolate(sets[s].float() / 255, size=(128, 128), mode="bilinear", align_corners=False) for s in "AB"}
    maps = {"old": {s: old_trunk((v - mean) / std) for s, v in up.items()}, "new": {s: new_trunk.feature_map(normalize(v)) for s, v in up.items()}}
    for k, m in maps.items():
        out[f"image_text {k}"] = {"R@1 twitter->noto, 2x2 grid": round(r1(F.adaptive_avg_pool2d(m["A"], 2), F.adaptive_avg_pool2d(m["B"], 2)), 1),
                                  "R@1 pooled": round(r1(m["A"].mean((2, 3)), m["B"].mean((2, 3))), 1)}
    po, pn = maps["old"]["B"].mean((2, 3)), maps["new"]["B"].mean((2, 3))
    out["image_text relative feature difference"] = round(float(((po - pn).norm(dim=1) / pn.norm(dim=1)).mean()), 3)

    # 4. metric_learning
    images = metric_normalize(sets["B"][:64])
    diff = old_backbone.efficientnet_lite0(pretrained=True).eval()(images) - EmbeddingNet(0, pretrained=True).eval()(images)
    out["metric_learning max |old - new|"] = float(diff.abs().max())
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
