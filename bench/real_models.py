"""Real models from `transformers` and `timm`, built from small configs with random weights (no
downloads), plus an LSTM language model in plain torch: the workloads of tests/test_models*.py and
bench/. Each entry builds (model, batch, loss_fn) for a device.

`transformers` and `timm` are test-only dependencies (ci/install_test_deps.sh installs them
without touching torch). Call `torchvision_compat.ensure_torchvision_importable()` before
importing timm (see that module).
"""

from __future__ import annotations

import os
from typing import Callable, Dict, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # building from configs never needs the Hub
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

VOCAB, BATCH, SEQ = 1000, 2, 16
IMAGE = 64

Built = Tuple[nn.Module, tuple, Callable]  # model, batch (inputs on the device), loss(model, *batch)


def _token_batch(device, seed=0, length=SEQ):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, VOCAB, (BATCH, length), generator=g).to(device)


def _lm_loss(model, ids):
    return model(input_ids=ids, labels=ids).loss


def gpt2(device, dropout=0.0) -> Built:
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=VOCAB, n_positions=64, n_embd=128, n_layer=2, n_head=4, bos_token_id=0,
                     eos_token_id=0, attn_implementation="sdpa", resid_pdrop=dropout, embd_pdrop=dropout,
                     attn_pdrop=dropout)
    model = GPT2LMHeadModel(cfg)
    model.loss_type = "ForCausalLM"  # silences transformers' one-time notice
    return model.to(device), (_token_batch(device),), _lm_loss


def bert(device, dropout=0.0) -> Built:
    from transformers import BertConfig, BertForMaskedLM

    cfg = BertConfig(vocab_size=VOCAB, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=256, max_position_embeddings=64, hidden_dropout_prob=dropout,
                     attention_probs_dropout_prob=dropout, attn_implementation="sdpa")
    ids = _token_batch(device)
    mask = torch.ones(BATCH, SEQ, dtype=torch.long).to(device)

    def loss(model, ids, mask):
        return model(input_ids=ids, attention_mask=mask, labels=ids).loss

    return BertForMaskedLM(cfg).to(device), (ids, mask), loss


def llama(device, dropout=0.0) -> Built:
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=False,
                      attention_dropout=dropout, attn_implementation="sdpa")
    return LlamaForCausalLM(cfg).to(device), (_token_batch(device),), _lm_loss


def t5(device, dropout=0.0) -> Built:
    from transformers import T5Config, T5ForConditionalGeneration

    cfg = T5Config(vocab_size=VOCAB, d_model=128, d_kv=32, d_ff=256, num_layers=2, num_decoder_layers=2,
                   num_heads=4, dropout_rate=dropout, decoder_start_token_id=0, pad_token_id=0,
                   eos_token_id=1, attn_implementation="sdpa")
    ids = _token_batch(device)
    labels = _token_batch(device, seed=1, length=8)

    def loss(model, ids, labels):
        return model(input_ids=ids, labels=labels).loss

    return T5ForConditionalGeneration(cfg).to(device), (ids, labels), loss


def _image_batch(device, batch=BATCH, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, 3, IMAGE, IMAGE, generator=g)
    y = torch.randint(0, 10, (batch,), generator=g)
    return x.to(device), y.to(device)


def _classify_loss(model, x, y):
    return F.cross_entropy(model(x), y)


def _timm(name, device, batch=BATCH, **kwargs) -> Built:
    import timm

    model = timm.create_model(name, pretrained=False, num_classes=10, **kwargs)
    return model.to(device), _image_batch(device, batch), _classify_loss


def resnet18(device, batch=BATCH) -> Built:
    return _timm("resnet18", device, batch)


def vit_tiny(device, batch=BATCH) -> Built:
    return _timm("vit_tiny_patch16_224", device, batch, img_size=IMAGE)


def mobilenetv3(device, batch=BATCH) -> Built:
    return _timm("mobilenetv3_small_100", device, batch)


class LstmLanguageModel(nn.Module):
    def __init__(self, vocab=VOCAB, dim=128, layers=2, dropout=0.0):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.lstm = nn.LSTM(dim, dim, num_layers=layers, batch_first=True, dropout=dropout)
        self.head = nn.Linear(dim, vocab)

    def forward(self, ids):
        out, _ = self.lstm(self.embed(ids))
        return self.head(out)


def lstm(device, dropout=0.0) -> Built:
    torch.manual_seed(0)
    model = LstmLanguageModel(dropout=dropout)

    def loss(model, ids):
        logits = model(ids[:, :-1])
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))

    return model.to(device), (_token_batch(device),), loss


TEXT_MODELS: Dict[str, Callable[..., Built]] = {"gpt2": gpt2, "bert": bert, "llama": llama, "t5": t5}
VISION_MODELS: Dict[str, Callable[..., Built]] = {"resnet18": resnet18, "vit_tiny": vit_tiny,
                                                  "mobilenetv3": mobilenetv3}
PLAIN_MODELS: Dict[str, Callable[..., Built]] = {"lstm": lstm}


def adamw_training_step(built: Built, capturable=False) -> Callable[[], torch.Tensor]:
    """The benchmarks' training step over a built model: AdamW (lr 1e-3), gradients set to None,
    forward, backward, update; returns the loss without reading it."""
    model, batch, loss_fn = built
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, capturable=capturable)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model, *batch)
        loss.backward()
        opt.step()
        return loss

    return step
