"""Fixtures: a tiny source tree, its mined dataset, a tiny randomly initialised BERT (no download), a temporary cache."""

import os
import string
import textwrap
from pathlib import Path

import pytest

GOOD = '''
def {name}(path, rows):
    """{doc}

    More details that are not part of the summary.
    """
    {name}_out = []
    for {name}_index, {name}_row in enumerate(rows):
        if {name}_index % 2 == 0:
            {name}_out.append(str({name}_row) + path)
        else:
            {name}_out.insert(0, repr({name}_row).strip().lower())
    {name}_total = sum(len({name}_item) for {name}_item in {name}_out)
    return {name}_out, {name}_total
'''

WORDS = ("read write parse open close load save csv json file rows text line lines split join "
         "sort merge count items values keys return a the of into from to list string number").split()


def write_tree(root: Path) -> Path:
    """Three packages and a top-level module; every filter and both dedup kinds are exercised."""
    pkga = root / "pkga"
    pkga.mkdir(parents=True)
    (pkga / "__init__.py").write_text("")
    funcs = [GOOD.format(name=f"helper_{i}_{w}", doc=f"{w.capitalize()} the {WORDS[i + 1]} {WORDS[i + 2]} rows carefully {i}")
             for i, w in enumerate(WORDS[:12])]
    bad = textwrap.dedent('''
        def short():
            """Too short."""
            return 1

        def doctest_only():
            """>>> doctest_only()
            1
            """
            return 1

        def generated():
            """Auto-generated wrapper for the native call."""
            return 2

        def has_url():
            """See https://example.com for what this does exactly."""
            return 3

        def stub(x):
            """Compute the value of something important here."""
            raise NotImplementedError

        def test_reads_file():
            """Check that reading a file works well."""
            assert True

        class Thing:
            def __repr__(self):
                """Return a printable representation of the thing."""
                return "Thing"

            def method(self, value):
                """Store the given value on the thing object."""
                self.value = value
                return self
    ''')
    (pkga / "core.py").write_text("".join(funcs) + bad)
    pkgb = root / "pkgb"
    pkgb.mkdir()
    (pkgb / "__init__.py").write_text("")
    dup = GOOD.format(name="helper_0_read", doc="Read the write parse rows carefully 0")
    exact = dup.replace("_out = []", "_out = []  # a comment only").replace("return ", "return  ")
    near = dup.replace("total = sum(", "total = max(")
    other = [GOOD.format(name=f"util_{i}", doc=f"Merge the {w} values with {WORDS[-i - 1]} quickly {i}") for i, w in enumerate(WORDS[12:22])]
    (pkgb / "copy.py").write_text(exact + near + "".join(other))
    (pkgb / "broken.py").write_text("def broken(:\n    pass\n")
    (root / "tool.py").write_text("".join(GOOD.format(name=f"tool_{i}", doc=f"Count the {w} items in the text line {i}")
                                         for i, w in enumerate(WORDS[22:30])))
    tests = root / "pkgc" / "tests"
    tests.mkdir(parents=True)
    (tests / "helpers.py").write_text(GOOD.format(name="check_rows", doc="Check that rows are parsed into a list"))
    return root


def write_tiny_model(folder: Path) -> Path:
    """A 2-layer, 32-wide BERT with random weights and a character-level WordPiece vocabulary."""
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    chars = string.ascii_lowercase + string.digits
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *chars, *(f"##{c}" for c in chars), *string.punctuation, *WORDS]
    (folder / "vocab.txt").write_text("\n".join(dict.fromkeys(vocab)) + "\n")
    BertTokenizerFast(vocab_file=str(folder / "vocab.txt")).save_pretrained(str(folder))
    import torch

    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(dict.fromkeys(vocab)), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=512)
    BertModel(config).save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="session", autouse=True)
def embedding_cache_root(tmp_path_factory) -> Path:
    """Every test's embedding cache lives in a temporary folder, never in ``~/.cache``."""
    root = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CONTRASUITE_CACHE", str(root))
        yield root


@pytest.fixture(scope="session")
def source_tree(tmp_path_factory) -> Path:
    return write_tree(tmp_path_factory.mktemp("src"))


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("tiny_bert"))


@pytest.fixture(scope="session")
def mined(source_tree, tmp_path_factory) -> Path:
    from contrasuite.domains.code_search.mine import MineConfig, mine

    out = tmp_path_factory.mktemp("mined")
    mine([source_tree], out, MineConfig(split_fractions=(0.5, 0.25, 0.25)), log=lambda m: None)
    return out


@pytest.fixture(scope="session")
def data_root() -> Path:
    return Path(os.environ["CONTRASUITE_DATA"])


@pytest.fixture(scope="session")
def run_overrides(tiny_model, mined):
    """``run_overrides(output_root)``: overrides that make a shipped code_search config a two-step CPU run of the tiny model."""
    def overrides(output_root: Path) -> list[str]:
        return [f"config.encoder.model={tiny_model}", f"config.data.folder={mined}", "config.data.train_limit=0",
                "config.data.val_limit=0", "config.data.test_limit=0", "config.batch_size=4", "run.max_steps=2",
                f"run.output_root={output_root}", "run.progress=false", "run.device=cpu", "config.eval.cosqa=false",
                "config.encoder.max_code_length=64", "config.eval.max_code_length=64"]

    return overrides


@pytest.fixture()
def make_task(run_overrides, tmp_path):
    """``make_task(config_stem, extra_overrides, progress)``: a set-up code_search task on the tiny model, data root
    ``tmp_path``; ``progress`` is the context's progress callable (default: none)."""
    import torch

    from contrasuite.core.task.protocol import TaskContext
    from contrasuite.pipelines.config import load_config

    configs = Path(__file__).resolve().parents[3] / "configs" / "code_search"

    def build(stem: str = "reduced_infonce", extra=(), progress=None):
        loaded = load_config(configs / f"{stem}.yaml", run_overrides(tmp_path) + list(extra))
        task = loaded.task_class()
        ctx = TaskContext(config=loaded.config, device=torch.device("cpu"), precision="fp32", run_dir=tmp_path,
                          data_root=tmp_path, seed=0)
        if progress is not None:
            ctx.progress = progress
        task.setup(ctx)
        return task

    return build
