"""Bad input to the domain commands (upscale, retrieve, translate, code-search, generate-negatives): exit 2 and
one line naming the file, key or task, with the run folder and the output path left as they were; a truncated
metric_learning stem cache is rebuilt (one line says so) instead of failing every later run."""

import io
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from contrasuite.pipelines.checkpoint import REQUIRED_KEYS
from contrasuite.pipelines.cli import main
from contrasuite.pipelines.config import load_config, save_resolved

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
SR = ("super_resolution/reduced_x2_l1.yaml", ["config.model.n_resblocks=1", "config.model.n_feats=8"])
TRANSLATION = ("translation/reduced_cut_emoji.yaml", ["config.generator.ngf=8", "config.generator.n_blocks=2"])
METRIC = ("metric_learning/emoji_multi_similarity.yaml", ["config.model.embedding_dim=32"])
IMAGE_SSL = ("image_ssl/reduced_infonce.yaml", [])


def fake_run(folder: Path, config: tuple[str, list[str]], modules: dict) -> Path:
    """A run folder as the engine writes it: the resolved config and ``checkpoints/best.pt`` holding ``modules``."""
    loaded = load_config(CONFIGS / config[0], config[1])
    (folder / "checkpoints").mkdir(parents=True)
    save_resolved(loaded.resolved, folder / "config.yaml")
    torch.save({key: {} for key in REQUIRED_KEYS} | {"modules": modules}, folder / "checkpoints" / "best.pt")
    return folder


def files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` and its bytes: what a refused command must leave as it was."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def refused(argv: list[str], capsys) -> str:
    """Run ``contrasuite ARGV``; it must exit 2 with exactly one line on stderr, returned."""
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert len(err[0]) < 700, err[0]
    return err[0]


def png(path: Path, seed: int = 0, size: int = 12) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.random.default_rng(seed).integers(0, 255, (size, size, 3), dtype=np.uint8)).save(path)
    return path


def edsr(n_feats: int) -> dict:
    from contrasuite.domains.super_resolution.networks import EDSR

    return EDSR(2, 1, n_feats).state_dict()


# -- a checkpoint of another network, a run of another task: upscale, retrieve, translate ----------------------


@pytest.mark.parametrize("modules, named", [
    ({"generator": edsr(4)}, "keys of another shape (checkpoint -> network): head.weight [4,3,3,3] -> [8,3,3,3]"),
    ({"model": edsr(8)}, "it has no module 'generator' (it has ['model'])"),
], ids=["another-width", "another-domain"])
def test_upscale_refuses_a_checkpoint_of_another_network(tmp_path, capsys, modules, named):
    run_dir = fake_run(tmp_path / "run", SR, modules)
    before = files(run_dir)
    line = refused(["upscale", str(run_dir), str(png(tmp_path / "in.png")), str(tmp_path / "out.png")], capsys)
    assert f"checkpoint {run_dir / 'checkpoints' / 'best.pt'} does not fit the network" in line and named in line
    assert files(run_dir) == before and not (tmp_path / "out.png").exists()


def test_upscale_refuses_a_run_of_another_task(tmp_path, capsys):
    run_dir = fake_run(tmp_path / "ssl", IMAGE_SSL, {})
    line = refused(["upscale", str(run_dir), str(png(tmp_path / "in.png")), str(tmp_path / "out")], capsys)
    assert f"{run_dir} is a run of task 'image_ssl'; upscale needs a 'super_resolution' run" in line
    assert not (tmp_path / "out").exists()


def test_retrieve_refuses_a_checkpoint_of_another_width(tmp_path, capsys):
    from contrasuite.domains.metric_learning.model import NormalizedEmbeddingNet

    run_dir = fake_run(tmp_path / "run", METRIC, {"model": NormalizedEmbeddingNet(16, pretrained=False).state_dict()})
    before = files(run_dir)
    query, gallery = png(tmp_path / "query.png"), tmp_path / "gallery"
    png(gallery / "a.png", 1), png(gallery / "b.png", 2)
    line = refused(["retrieve", str(run_dir), str(query), str(gallery), "--out", str(tmp_path / "strip.png")], capsys)
    assert f"checkpoint {run_dir / 'checkpoints' / 'best.pt'} does not fit the network" in line
    assert "keys of another shape (checkpoint -> network): head." in line and "[16," in line
    assert files(run_dir) == before and not (tmp_path / "strip.png").exists()


def test_translate_refuses_another_domains_network(tmp_path, capsys):
    run_dir = fake_run(tmp_path / "run", TRANSLATION, {"generator": edsr(8)})
    before = files(run_dir)
    png(tmp_path / "in" / "a.png")
    line = refused(["translate", str(run_dir), str(tmp_path / "in"), str(tmp_path / "out")], capsys)
    assert f"checkpoint {run_dir / 'checkpoints' / 'best.pt'} does not fit the network" in line
    assert "missing keys: model.1.weight, model.1.bias, model.4.weight, ...; 13 unexpected keys: mean, head.weight" in line
    assert files(run_dir) == before and not (tmp_path / "out").exists()


def test_translate_refuses_an_output_path_that_is_a_file(tmp_path, capsys):
    from contrasuite.domains.translation.task import build_generator

    config = load_config(CONFIGS / TRANSLATION[0], TRANSLATION[1]).config
    run_dir = fake_run(tmp_path / "run", TRANSLATION, {"generator": build_generator(config).state_dict()})
    png(tmp_path / "in" / "a.png")
    out = tmp_path / "out.png"
    out.write_bytes(b"a file the user keeps")
    line = refused(["translate", str(run_dir), str(tmp_path / "in"), str(out)], capsys)
    assert line.endswith(f"OUTPUT_DIR {out} is a file; give a folder (it is created when missing)")
    assert out.read_bytes() == b"a file the user keeps"


# -- the metric_learning stem cache --------------------------------------------------------------------------


def test_a_truncated_stem_cache_is_rebuilt(tmp_path, capsys):
    from tests.domains.metric_learning.conftest import make_tiny_cub

    data, cache = make_tiny_cub(tmp_path / "data"), tmp_path / "cache"
    argv = ["train", str(CONFIGS / "metric_learning" / "cub200_multi_similarity.yaml"), "--data-root", str(data),
            "run.epochs=1", "run.max_steps=1", "run.progress=false", "run.precision=fp32", "run.device=cpu",
            f"run.output_root={tmp_path / 'runs'}", f"config.data.cache_dir={cache}", "config.data.image_size=32",
            "config.data.augment=false", "config.model.freeze_blocks=5", "config.model.cache_frozen=true",
            "config.model.embedding_dim=16", "config.sampler.m_per_class=2", "config.batch_size=4",
            "config.eval.batch_size=16"]
    assert main(argv) == 0
    stem = sorted((cache / "metric_learning" / "stems").glob("*.pt"))[0]
    whole = stem.read_bytes()
    stem.write_bytes(whole[: len(whole) // 2])  # a run killed while writing it
    capsys.readouterr()
    assert main(argv) == 0
    rebuilt = [line for line in capsys.readouterr().err.splitlines() if "stem cache" in line]
    assert len(rebuilt) == 1 and rebuilt[0].endswith("rebuilt it")
    assert f"the stem cache {stem} was truncated or damaged" in rebuilt[0]
    assert torch.equal(torch.load(stem, weights_only=True), torch.load(io.BytesIO(whole), weights_only=True))


# -- code-search ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def code_search(tmp_path_factory) -> dict[str, Path]:
    """A tiny random BERT, a source tree and its index as ``code-search index`` writes it."""
    from tests.domains.code_search.conftest import write_tiny_model, write_tree

    root = tmp_path_factory.mktemp("code_search")
    model, source = write_tiny_model(root / "bert"), write_tree(root / "src")
    index = root / "index" / "tree"
    assert main(["code-search", "index", str(source), "--out", str(index), "--model", str(model)]) == 0
    return {"model": model, "source": source, "index": index}


def code_search_run(folder: Path, model: Path) -> Path:
    return fake_run(folder, ("code_search/reduced_infonce.yaml", [f"config.encoder.model={model}"]), {})


@pytest.mark.parametrize("suffix", [".json", ".safetensors"])
def test_code_search_query_refuses_a_truncated_index(code_search, tmp_path, capsys, suffix):
    folder = tmp_path / "index"
    shutil.copytree(code_search["index"].parent, folder)
    damaged = folder / f"tree{suffix}"
    damaged.write_bytes(damaged.read_bytes()[:200])
    before = files(folder)
    line = refused(["code-search", "query", str(folder / "tree"), "read a csv file"], capsys)
    assert f"{damaged}: not a readable index" in line and "rebuild it with `contrasuite code-search index`" in line
    assert files(folder) == before


@pytest.mark.parametrize("query", ["", "   "])
def test_code_search_query_refuses_an_empty_query(code_search, capsys, query):
    line = refused(["code-search", "query", str(code_search["index"]), query], capsys)
    assert line == "contrasuite code-search query: the query is empty; give words that describe the function you look for"


def test_code_search_index_refuses_a_run_of_another_task(code_search, tmp_path, capsys):
    run_dir = fake_run(tmp_path / "ssl", IMAGE_SSL, {})
    out = tmp_path / "idx"
    line = refused(["code-search", "index", str(code_search["source"]), "--out", str(out), "--run", str(run_dir)], capsys)
    assert f"{run_dir} is a run of task 'image_ssl'; code-search index --run needs a 'code_search' run" in line
    assert not out.with_suffix(".json").exists()


class Payload:
    """What a malicious best.pt holds: unpickling it would write ``mark``."""

    def __init__(self, mark: Path) -> None:
        self.mark = mark

    def __reduce__(self):
        return exec, (f"open({str(self.mark)!r}, 'w').write('the payload ran')",)


def test_code_search_index_never_unpickles_a_checkpoint(code_search, tmp_path, capsys):
    run_dir = code_search_run(tmp_path / "run", code_search["model"])
    best, mark = run_dir / "checkpoints" / "best.pt", tmp_path / "payload_ran"
    best.write_bytes(pickle.dumps(Payload(mark)))
    before = files(run_dir)
    out = tmp_path / "idx"
    line = refused(["code-search", "index", str(code_search["source"]), "--out", str(out), "--run", str(run_dir)], capsys)
    assert f"checkpoint {best} is not a weights-only checkpoint: it holds something other than tensors" in line
    assert not mark.exists() and files(run_dir) == before and not out.with_suffix(".json").exists()


# -- generate-negatives ---------------------------------------------------------------------------------------


def generate(tmp_path: Path, captions: str, name: str, capsys) -> str:
    """``generate-negatives`` of an image_text config reading the captions file ``name`` holding ``captions``."""
    png(tmp_path / "images" / "x.png")
    (tmp_path / name).write_text(captions)
    before = files(tmp_path)
    line = refused(["generate-negatives", str(CONFIGS / "image_text" / "reduced_text_negatives.yaml"),
                    "config.data.source=captions", f"config.data.captions_file={tmp_path / name}",
                    f"config.data.image_root={tmp_path / 'images'}", "--out", str(tmp_path / "out" / "negatives.jsonl")],
                   capsys)
    assert files(tmp_path) == before and not (tmp_path / "out").exists()
    return line


def test_generate_negatives_names_the_line_of_a_malformed_jsonl(tmp_path, capsys):
    line = generate(tmp_path, '{"image": "x.png", "caption": "a red cube"}\n\n{"image": "x.png", "capt', "c.jsonl", capsys)
    assert f"{tmp_path / 'c.jsonl'}, line 3, column 20: not valid JSON (Unterminated string" in line


def test_generate_negatives_names_the_columns_of_a_csv_without_captions(tmp_path, capsys):
    line = generate(tmp_path, "image,text\nx.png,a red cube\n", "c.csv", capsys)
    assert f"{tmp_path / 'c.csv'}: CSV needs columns 'image' and 'caption'; missing ['caption'], it has ['image', 'text']" in line


def test_generate_negatives_names_the_task_of_another_config(tmp_path, capsys):
    line = refused(["generate-negatives", str(CONFIGS / "image_ssl" / "reduced_infonce.yaml"),
                    "--out", str(tmp_path / "negatives.jsonl")], capsys)
    assert "reduced_infonce.yaml: a config of task 'image_ssl'; generate-negatives needs an image_text config" in line
    assert not (tmp_path / "negatives.jsonl").exists()
