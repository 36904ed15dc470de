"""A wider zoo of real architectures than bench/real_models.py, for bench/zoo.py and
tests/test_zoo.py: timm vision models (EfficientNet, ConvNeXt, RegNet, DeiT, MobileViT,
GhostNet, DenseNet, Swin, MLP-Mixer) and transformers text models (DistilBERT, RoBERTa, GPT-Neo,
OPT, Mistral, Qwen2, Phi, Gemma, BART, ELECTRA, ALBERT), each from a small config with random
weights and its dropout off, so that CPU and pjrt runs from the same weights are comparable.
Every entry builds (model, batch, loss_fn) for a device, as real_models' do.

Call `torchvision_compat.ensure_torchvision_importable()` before building a timm model.
"""

from __future__ import annotations

from typing import Callable, Dict

import torch
import torch.nn.functional as F

from real_models import BATCH, IMAGE, VOCAB, Built, _token_batch

SEQ = 32


def _image_batch(device, size=IMAGE):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(BATCH, 3, size, size, generator=g)
    return x.to(device), torch.randint(0, 10, (BATCH,), generator=g).to(device)


def _timm(name, drop_path=True, **kwargs) -> Callable[[str], Built]:
    def build(device) -> Built:
        import timm

        # Dropout and stochastic depth draw random numbers, which differ between devices.
        off = {"drop_rate": 0.0, **({"drop_path_rate": 0.0} if drop_path else {})}
        model = timm.create_model(name, pretrained=False, num_classes=10, **off, **kwargs)
        return model.to(device), _image_batch(device), lambda m, x, y: F.cross_entropy(m(x), y)
    return build


_DROPOUTS = ("dropout", "attention_dropout", "activation_dropout", "hidden_dropout_prob",
             "attention_probs_dropout_prob", "resid_dropout", "embed_dropout", "classifier_dropout",
             "seq_classif_dropout", "qa_dropout", "resid_pdrop", "embd_pdrop", "attn_pdrop",
             "hidden_dropout", "classifier_dropout_prob")


def _config(config_class, **kwargs):
    import transformers

    cfg = getattr(transformers, config_class)(**kwargs)
    for key in _DROPOUTS:
        if isinstance(getattr(cfg, key, None), float):
            setattr(cfg, key, 0.0)
    return cfg


def _causal_lm(config_class, model_class, **kwargs) -> Callable[[str], Built]:
    def build(device) -> Built:
        import transformers

        model = getattr(transformers, model_class)(_config(config_class, **kwargs))
        ids = _token_batch(device, length=SEQ)
        return model.to(device), (ids,), lambda m, ids: m(input_ids=ids, labels=ids).loss
    return build


def _classifier(config_class, model_class, **kwargs) -> Callable[[str], Built]:
    def build(device) -> Built:
        import transformers

        model = getattr(transformers, model_class)(_config(config_class, num_labels=2, **kwargs))
        ids = _token_batch(device, length=SEQ)
        labels = torch.tensor([0, 1])[:BATCH].to(device)
        return model.to(device), (ids, labels), lambda m, ids, y: m(input_ids=ids, labels=y).loss
    return build


def _seq2seq(config_class, model_class, **kwargs) -> Callable[[str], Built]:
    def build(device) -> Built:
        import transformers

        model = getattr(transformers, model_class)(_config(config_class, **kwargs))
        ids, labels = _token_batch(device, length=SEQ), _token_batch(device, seed=1, length=8)
        return model.to(device), (ids, labels), lambda m, ids, y: m(input_ids=ids, labels=y).loss
    return build


_SMALL = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
              intermediate_size=128, max_position_embeddings=64)

VISION: Dict[str, Callable[[str], Built]] = {
    "efficientnet_b0": _timm("efficientnet_b0"),
    "convnext_atto": _timm("convnext_atto"),
    "regnetx_002": _timm("regnetx_002"),  # grouped convolutions
    "deit_tiny": _timm("deit_tiny_patch16_224", img_size=IMAGE),
    "mobilevit_xxs": _timm("mobilevit_xxs"),
    "ghostnet_100": _timm("ghostnet_100", drop_path=False),
    "densenet121": _timm("densenet121", drop_path=False),
    # Shifted windows at 64x64: 16, 8, 4 and 2 patches a side, windows of 4.
    "swin_small_config": _timm("swin_tiny_patch4_window7_224", img_size=IMAGE, window_size=4, embed_dim=32,
                               depths=(2, 2, 2, 2), num_heads=(1, 2, 4, 8)),
    "mixer_s16": _timm("mixer_s16_224", img_size=IMAGE),
}

TEXT: Dict[str, Callable[[str], Built]] = {
    "distilbert": _classifier("DistilBertConfig", "DistilBertForSequenceClassification", vocab_size=VOCAB,
                              dim=64, n_layers=2, n_heads=4, hidden_dim=128),
    "roberta": _classifier("RobertaConfig", "RobertaForSequenceClassification", **_SMALL),
    "electra": _classifier("ElectraConfig", "ElectraForSequenceClassification", **_SMALL, embedding_size=64),
    # One layer's weights shared by every layer: each gradient sums over the layers.
    "albert": _classifier("AlbertConfig", "AlbertForSequenceClassification", **_SMALL, embedding_size=32),
    "gpt_neo": _causal_lm("GPTNeoConfig", "GPTNeoForCausalLM", vocab_size=VOCAB, hidden_size=64, num_layers=2,
                          num_heads=4, attention_types=[[["global", "local"], 1]], max_position_embeddings=64,
                          window_size=16, bos_token_id=0, eos_token_id=0),
    "opt": _causal_lm("OPTConfig", "OPTForCausalLM", vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2,
                      num_attention_heads=4, ffn_dim=128, max_position_embeddings=64, word_embed_proj_dim=64,
                      bos_token_id=0, eos_token_id=0, pad_token_id=1),
    "mistral": _causal_lm("MistralConfig", "MistralForCausalLM", **_SMALL, num_key_value_heads=2, sliding_window=16),
    "qwen2": _causal_lm("Qwen2Config", "Qwen2ForCausalLM", **_SMALL, num_key_value_heads=2),
    "phi": _causal_lm("PhiConfig", "PhiForCausalLM", **_SMALL),
    "gemma": _causal_lm("GemmaConfig", "GemmaForCausalLM", **_SMALL, num_key_value_heads=2, head_dim=16),
    "bart": _seq2seq("BartConfig", "BartForConditionalGeneration", vocab_size=VOCAB, d_model=64, encoder_layers=2,
                     decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
                     decoder_ffn_dim=128, max_position_embeddings=64),
}

MODELS: Dict[str, Callable[[str], Built]] = {**VISION, **TEXT}
