"""Real models as users train them: Hugging Face `transformers` models built from small random
configs (no weights downloaded), each wrapped so that its forward takes token ids (or pixels)
and returns the model's own training loss (`labels=`). The CPU tier (`test_hf_models.py`) trains
each through evt's reference path against eager in float32; the GPU tier
(`test_gpu_hf_models.py`) trains some in bf16 on real kernels against float32 eager.

Session 57's probe ran 21 such configs (and seven `timm` vision models: ResNet-50 channels-last,
ConvNeXt, ViT, EfficientNet, MobileNetV3, MLP-Mixer), rest eager and Inductor: every step
matched eager, no region fell back. Session 60's ran 19 more (Gemma 2 and 3, OLMo 1 and 2, StableLM,
Falcon, GPT-J, Cohere, Granite, StarCoder2, DeBERTa-v2, MPNet, ALBERT, BLOOM, Swin, DeiT, BEiT,
mT5, Pegasus); four of them are cases here. Dropout is off (eager's masks and evt's would differ).

Needs `transformers` (the `models` extra: `pip install -e ".[dev,models]"`); the tests skip
without it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class Sizes:
    dim: int  # hidden size
    heads: int
    vocab: int
    batch: int
    seq: int


CPU = Sizes(dim=64, heads=4, vocab=128, batch=2, seq=16)
GPU = Sizes(dim=256, heads=4, vocab=1024, batch=4, seq=128)


class WithLoss(nn.Module):
    """`model(**inputs, labels=...)`'s loss as the forward's result: `forward(ids)` for language
    models (the ids are the labels too; a seq2seq model's labels are the ids reversed), or
    `forward(pixels, labels)` for image classifiers."""

    def __init__(self, model: nn.Module, kind: str):
        super().__init__()
        self.model, self.kind = model, kind

    def forward(self, x, labels=None):
        if self.kind == "lm":
            return self.model(input_ids=x, labels=x).loss
        if self.kind == "seq2seq":
            return self.model(input_ids=x, labels=x.flip(1)).loss
        return self.model(pixel_values=x, labels=labels).loss


@dataclass(frozen=True)
class Case:
    config: Callable[[Sizes], object]  # sizes -> the model's config
    model: str  # the transformers class to build from it
    kind: str = "lm"  # "lm", "seq2seq" or "image"

    def build(self, s: Sizes) -> nn.Module:
        import transformers

        return WithLoss(getattr(transformers, self.model)(self.config(s)), self.kind)

    def inputs(self, s: Sizes) -> list[torch.Tensor]:
        if self.kind == "image":
            return [torch.randn(s.batch, 3, 32, 32), torch.randint(0, 10, (s.batch,))]
        return [torch.randint(0, s.vocab, (s.batch, s.seq))]


def _decoder(name: str, **extra):
    """A LLaMA-like decoder's config: grouped-query attention (half as many key/value heads)."""

    def config(s: Sizes):
        import transformers

        return getattr(transformers, name)(
            vocab_size=s.vocab, hidden_size=s.dim, intermediate_size=2 * s.dim,
            num_hidden_layers=2, num_attention_heads=s.heads, num_key_value_heads=s.heads // 2,
            max_position_embeddings=2 * s.seq, **extra)  # fmt: skip

    return config


def _gpt2(s: Sizes):
    from transformers import GPT2Config

    return GPT2Config(vocab_size=s.vocab, n_embd=s.dim, n_layer=2, n_head=s.heads,
                      n_positions=2 * s.seq, attn_pdrop=0.0, resid_pdrop=0.0,
                      embd_pdrop=0.0)  # fmt: skip


def _bert(name: str, **extra):
    def config(s: Sizes):
        import transformers

        return getattr(transformers, name)(
            vocab_size=s.vocab, hidden_size=s.dim, num_hidden_layers=2,
            num_attention_heads=s.heads, intermediate_size=4 * s.dim,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
            max_position_embeddings=2 * s.seq + 2, **extra)  # fmt: skip

    return config


def _t5(s: Sizes):
    from transformers import T5Config

    return T5Config(vocab_size=s.vocab, d_model=s.dim, d_kv=s.dim // s.heads, d_ff=2 * s.dim,
                    num_layers=2, num_heads=s.heads, dropout_rate=0.0,
                    decoder_start_token_id=0, pad_token_id=0)  # fmt: skip


def _bart(s: Sizes):
    from transformers import BartConfig

    return BartConfig(vocab_size=s.vocab, d_model=s.dim, encoder_layers=2, decoder_layers=2,
                      encoder_attention_heads=s.heads, decoder_attention_heads=s.heads,
                      encoder_ffn_dim=2 * s.dim, decoder_ffn_dim=2 * s.dim,
                      max_position_embeddings=2 * s.seq, dropout=0.0, attention_dropout=0.0,
                      activation_dropout=0.0)  # fmt: skip


def _opt(s: Sizes):
    from transformers import OPTConfig

    return OPTConfig(vocab_size=s.vocab, hidden_size=s.dim, ffn_dim=2 * s.dim,
                     num_hidden_layers=2, num_attention_heads=s.heads,
                     max_position_embeddings=2 * s.seq, word_embed_proj_dim=s.dim, dropout=0.0,
                     attention_dropout=0.0)  # fmt: skip


def _neox(s: Sizes):
    from transformers import GPTNeoXConfig

    return GPTNeoXConfig(vocab_size=s.vocab, hidden_size=s.dim, intermediate_size=2 * s.dim,
                         num_hidden_layers=2, num_attention_heads=s.heads,
                         max_position_embeddings=2 * s.seq, hidden_dropout=0.0,
                         attention_dropout=0.0)  # fmt: skip


def _vit(s: Sizes):
    from transformers import ViTConfig

    return ViTConfig(hidden_size=s.dim, num_hidden_layers=2, num_attention_heads=s.heads,
                     intermediate_size=4 * s.dim, image_size=32, patch_size=4, num_labels=16,
                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)  # fmt: skip


def _gemma2(s: Sizes):
    """Gemma 2: tanh soft-capping of the attention scores and of the LM head's logits."""
    from transformers import Gemma2Config

    return Gemma2Config(vocab_size=s.vocab, hidden_size=s.dim, intermediate_size=2 * s.dim,
                        num_hidden_layers=2, num_attention_heads=s.heads,
                        num_key_value_heads=s.heads // 2, head_dim=s.dim // s.heads,
                        max_position_embeddings=2 * s.seq, sliding_window=s.seq // 2,
                        final_logit_softcapping=30.0, attn_logit_softcapping=50.0)  # fmt: skip


def _bloom(s: Sizes):
    """BLOOM: ALiBi position biases, LayerNorm after the embedding."""
    from transformers import BloomConfig

    return BloomConfig(vocab_size=s.vocab, hidden_size=s.dim, n_layer=2, n_head=s.heads,
                       hidden_dropout=0.0, attention_dropout=0.0)  # fmt: skip


def _falcon(s: Sizes):
    """Falcon: multi-query attention (one key and value head, taken from the fused QKV projection
    by list indices, `[..., [-2], :]`), attention and MLP in parallel off one LayerNorm."""
    from transformers import FalconConfig

    return FalconConfig(vocab_size=s.vocab, hidden_size=s.dim, num_hidden_layers=2,
                        num_attention_heads=s.heads, hidden_dropout=0.0,
                        attention_dropout=0.0)  # fmt: skip


def _swin(s: Sizes):
    """Swin: windowed attention with a relative position bias, patch merging."""
    from transformers import SwinConfig

    return SwinConfig(image_size=32, patch_size=4, embed_dim=s.dim // 4, depths=[1, 1],
                      num_heads=[2, 2], window_size=4, num_labels=16, hidden_dropout_prob=0.0,
                      attention_probs_dropout_prob=0.0, drop_path_rate=0.0)  # fmt: skip


CASES: dict[str, Case] = {
    "gpt2": Case(_gpt2, "GPT2LMHeadModel"),
    "bert": Case(_bert("BertConfig"), "BertForMaskedLM"),
    "roberta": Case(_bert("RobertaConfig", pad_token_id=1), "RobertaForMaskedLM"),
    "llama": Case(_decoder("LlamaConfig"), "LlamaForCausalLM"),
    "mistral": Case(_decoder("MistralConfig"), "MistralForCausalLM"),
    "qwen2": Case(_decoder("Qwen2Config"), "Qwen2ForCausalLM"),
    "qwen3": Case(_decoder("Qwen3Config"), "Qwen3ForCausalLM"),  # RMSNorm on q and k
    "gemma": Case(_decoder("GemmaConfig"), "GemmaForCausalLM"),  # tanh GELU gate
    "phi": Case(_decoder("PhiConfig", partial_rotary_factor=0.5, resid_pdrop=0.0,
                         embd_pdrop=0.0), "PhiForCausalLM"),  # fmt: skip
    "mixtral": Case(_decoder("MixtralConfig", num_local_experts=4, num_experts_per_tok=2),
                    "MixtralForCausalLM"),  # fmt: skip
    # every token to all four experts: the GPU tier's variant. With top-2 routing, bf16 changes
    # some tokens' expert pair against float32 (at the GPU tier's sizes 2 and 1 of 512 tokens in
    # eager's two layers), evt's rounding (float32 inside its epilogues) changes others, and each
    # change moves those experts' weight gradients by far more than rounding does (session 57:
    # evt's down_proj gradient 0.043 from float32, bf16 eager's 0.012)
    "mixtral_dense": Case(_decoder("MixtralConfig", num_local_experts=4, num_experts_per_tok=4),
                          "MixtralForCausalLM"),  # fmt: skip
    "gpt_neox": Case(_neox, "GPTNeoXForCausalLM"),
    "opt": Case(_opt, "OPTForCausalLM"),
    "t5": Case(_t5, "T5ForConditionalGeneration", "seq2seq"),
    "bart": Case(_bart, "BartForConditionalGeneration", "seq2seq"),
    "vit": Case(_vit, "ViTForImageClassification", "image"),
    "gemma2": Case(_gemma2, "Gemma2ForCausalLM"),
    "bloom": Case(_bloom, "BloomForCausalLM"),
    "deberta_v2": Case(_bert("DebertaV2Config"), "DebertaV2ForMaskedLM"),  # disentangled attention
    "swin": Case(_swin, "SwinForImageClassification", "image"),
    "falcon": Case(_falcon, "FalconForCausalLM"),
}


def train_step(model: nn.Module, inputs, fn=None) -> dict[str, torch.Tensor]:
    """Loss and parameter gradients of one training step through `fn` (the model or its compile),
    as float32."""
    model.zero_grad(set_to_none=True)
    value = (model if fn is None else fn)(*inputs)
    value.backward()
    got = {"loss": value.detach().float()}
    got.update({n: p.grad.float() for n, p in model.named_parameters() if p.grad is not None})
    return got


def errors(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> dict[str, float]:
    """Each tensor's largest error relative to its largest element, or to 1e-4 of the step's
    largest gradient where the tensor is below that: a key projection's bias gets a gradient of
    exactly 0 in exact arithmetic (softmax ignores what adds to every key's score alike), and
    what eager computes for it is rounding noise."""
    floor = 1e-4 * max(t.abs().max().item() for t in want.values())
    return {n: ((got[n].double() - want[n].double()).abs().max()
                / want[n].double().abs().max().clamp_min(floor)).item() for n in want}  # fmt: skip
