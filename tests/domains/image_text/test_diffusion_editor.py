import json

import pytest
import torch

from contrasuite.domains.image_text.image_negatives import DiffusionEditor


def tiny_inpaint_pipeline(path):
    """A randomly initialised StableDiffusionInpaintPipeline built from configs (no download)."""
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionInpaintPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    torch.manual_seed(0)
    chars = "abcdefghijklmnopqrstuvwxyz"
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1, **{c: 2 + i for i, c in enumerate(chars)},
             **{c + "</w>": 28 + i for i, c in enumerate(chars)}}
    (path / "tok").mkdir(parents=True)
    (path / "tok" / "vocab.json").write_text(json.dumps(vocab))
    (path / "tok" / "merges.txt").write_text("#version: 0.2\n")
    tokenizer = CLIPTokenizer(str(path / "tok" / "vocab.json"), str(path / "tok" / "merges.txt"), model_max_length=16)
    text = CLIPTextModel(CLIPTextConfig(vocab_size=len(vocab), hidden_size=16, intermediate_size=32, num_attention_heads=2,
                                        num_hidden_layers=1, max_position_embeddings=16, bos_token_id=0, eos_token_id=1,
                                        pad_token_id=1))
    vae = AutoencoderKL(block_out_channels=(8, 8), down_block_types=("DownEncoderBlock2D",) * 2,
                        up_block_types=("UpDecoderBlock2D",) * 2, latent_channels=4, norm_num_groups=4, layers_per_block=1)
    unet = UNet2DConditionModel(block_out_channels=(8, 16), layers_per_block=1, sample_size=16, in_channels=9, out_channels=4,
                                down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
                                up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"), cross_attention_dim=16,
                                norm_num_groups=4, attention_head_dim=2)
    pipe = StableDiffusionInpaintPipeline(vae=vae, text_encoder=text, tokenizer=tokenizer, unet=unet,
                                          scheduler=DDIMScheduler(steps_offset=1), safety_checker=None, feature_extractor=None,
                                          requires_safety_checker=False)
    pipe.save_pretrained(path / "pipe")
    return path / "pipe"


@pytest.mark.slow  # ~20 s alone, longer on a loaded machine
def test_tiny_inpainting_pipeline_edits_only_the_object(tmp_path):
    editor = DiffusionEditor(tiny_inpaint_pipeline(tmp_path), device="cpu", steps=2, size=32, guidance_scale=1.0)
    assert editor.pipe.unet.dtype == torch.float32  # fp16 only on CUDA
    image = torch.ones(3, 24, 24)
    image[:, 6:18, 6:18] = torch.tensor([0.0, 0.0, 1.0])[:, None, None]
    edited = editor(image, "red heart", seed=0)
    assert edited.shape == image.shape and torch.isfinite(edited).all()
    assert torch.equal(edited[:, :4, :], image[:, :4, :])  # background outside the mask is kept
    assert not torch.allclose(edited[:, 8:16, 8:16], image[:, 8:16, 8:16])
    assert torch.equal(editor(image, "red heart", seed=0), edited)  # seeded
