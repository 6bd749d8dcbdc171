"""all-MiniLM-L6-v2, a small BERT, run on the CPU with numpy: the default encoder (`encoder = "minilm"`).

The forward pass is BERT's (embeddings, then per layer masked self-attention and a GELU feed-forward,
each followed by a residual LayerNorm), mean-pooled over the real tokens and L2-normalised, as
sentence-transformers computes it. The weights file (safetensors) is read tensor by tensor: loading
never holds the whole file beside the arrays made of it. Its cost is arithmetic: ~21 MFLOP a token,
about 0.5 ms a token on one core, so a message and its reply cost 20-40 ms of CPU to embed
(bench/daemon_rss.py); the static encoder (bot/ranking/static_embedding.py) is a lookup instead, with less
recall.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from bot.ranking.embedding import Embedder
from bot.ranking.encode_threads import single_threaded_blas
from bot.ranking.safetensors_reader import read_safetensors

if TYPE_CHECKING:
    from tokenizers import Tokenizer

    from bot.ranking.embedding import ModelFiles, Vectors

MODEL_NAME = "all-MiniLM-L6-v2"
MAX_TOKENS = 256  # sentence-transformers' max_seq_length for this model
# Padded tokens per forward pass: bounds the attention scores (heads × length² floats per text).
TOKEN_BUDGET = 1024


class MiniLM(Embedder):
    """A BERT sentence encoder: `encode(texts)` gives one unit vector (float32, `dim`) per text.

    `model_id` names the model and a hash of its weights and tokenizer, stored with every vector,
    so vectors of different models are never compared.
    """

    def __init__(
        self, weights: Mapping[str, Any], tokenizer: Tokenizer, *, heads: int, model_id: str
    ) -> None:
        import numpy as np

        w = {name.removeprefix("bert."): np.asarray(value, dtype=np.float32)
             for name, value in weights.items()}
        self.model_id = model_id
        self.heads = heads
        self._tokenizer = tokenizer
        # Half the bytes for half the weights: a text only looks up its tokens' rows, whose float16
        # rounding (a relative 5e-4) moves a vector's cosines by about 1e-5, a twentieth of what
        # storing it as int8 does.
        self._word = w["embeddings.word_embeddings.weight"].astype(np.float16)
        self._position = w["embeddings.position_embeddings.weight"]
        self._type0 = w["embeddings.token_type_embeddings.weight"][0]
        self._norm = (w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        self.dim = int(self._word.shape[1])
        self._layers: list[dict[str, Any]] = []
        index = 0
        while f"encoder.layer.{index}.attention.self.query.weight" in w:
            p = f"encoder.layer.{index}."
            attention = p + "attention."
            # torch's Linear keeps (out, in): x @ W.T is a transposed view, which BLAS reads as it
            # is (a contiguous copy is no faster and would double the memory).
            self._layers.append({
                "qkv": np.concatenate(
                    [w[f"{attention}self.{part}.weight"] for part in ("query", "key", "value")]).T,
                "qkv_b": np.concatenate(
                    [w[f"{attention}self.{part}.bias"] for part in ("query", "key", "value")]),
                "out": w[attention + "output.dense.weight"].T,
                "out_b": w[attention + "output.dense.bias"],
                "norm1": (w[attention + "output.LayerNorm.weight"], w[attention + "output.LayerNorm.bias"]),
                "up": w[p + "intermediate.dense.weight"].T,
                "up_b": w[p + "intermediate.dense.bias"],
                "down": w[p + "output.dense.weight"].T,
                "down_b": w[p + "output.dense.bias"],
                "norm2": (w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"]),
            })
            index += 1
        if not self._layers:
            raise ValueError("no encoder layers in the weights (not a BERT model?)")
        self._max_tokens = min(MAX_TOKENS, int(self._position.shape[0]))
        tokenizer.no_padding()
        tokenizer.enable_truncation(self._max_tokens)

    @classmethod
    def load(cls, files: ModelFiles) -> MiniLM:
        """Read the weights, tokenizer and config; raises (OSError, KeyError, the libraries' errors)
        when they are not usable."""
        single_threaded_blas()
        from tokenizers import Tokenizer

        digest = hashlib.sha256()
        with files.open("model.safetensors") as stream:
            weights = read_safetensors(stream, digest)
        raw_tokenizer = files.read("tokenizer.json")
        try:
            config = json.loads(files.read("config.json"))
        except (OSError, KeyError):
            config = {}
        digest.update(raw_tokenizer)
        tokenizer = Tokenizer.from_str(raw_tokenizer.decode("utf-8"))
        heads = int(config.get("num_attention_heads", 12))
        return cls(weights, tokenizer, heads=heads, model_id=f"{files.label}@{digest.hexdigest()[:12]}")

    def encode(self, texts: Sequence[str]) -> Vectors:
        """Unit vectors, one row per text, in order; texts of similar length share a forward pass."""
        import numpy as np

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        # One text at a time: the tokenizer's batch call starts a thread pool that warns on fork.
        ids = [self._tokenizer.encode(text).ids for text in texts]
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        start = 0
        while start < len(order):
            end = start + 1
            while end < len(order) and (end + 1 - start) * len(ids[order[end]]) <= TOKEN_BUDGET:
                end += 1
            chunk = order[start:end]
            out[chunk] = self._forward([ids[i] for i in chunk])
            start = end
        return out

    def _forward(self, batch: list[list[int]]) -> Vectors:
        import numpy as np

        tokens, mask = padded(batch, np.float32)
        n, t = tokens.shape
        # Linear layers on (n·t, d) rows: numpy's stacked (n, t, d) @ (d, e) is many times slower.
        embedded = self._word[tokens] + self._position[:t] + self._type0
        x = _layer_norm(embedded.reshape(n * t, -1), *self._norm)
        d = x.shape[1]
        h = self.heads
        scale = np.float32(1.0 / np.sqrt(d // h))
        # Padding gets no attention: a large negative score before the softmax.
        padding = ((1.0 - mask) * np.float32(-1e9))[:, None, None, :]
        for layer in self._layers:
            qkv = (x @ layer["qkv"] + layer["qkv_b"]).reshape(n, t, 3, h, d // h).transpose(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]
            scores = q @ k.transpose(0, 1, 3, 2)
            scores *= scale
            scores += padding
            scores -= scores.max(axis=-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(axis=-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(n * t, d)
            x = _layer_norm(x + context @ layer["out"] + layer["out_b"], *layer["norm1"])
            hidden = _gelu(x @ layer["up"] + layer["up_b"])
            x = _layer_norm(x + hidden @ layer["down"] + layer["down_b"], *layer["norm2"])
        weights = mask.reshape(n * t, 1)
        pooled = (x * weights).reshape(n, t, d).sum(axis=1) / mask.sum(axis=1, keepdims=True)
        pooled /= np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), np.float32(1e-12))
        result: Vectors = pooled.astype(np.float32, copy=False)
        return result


def _layer_norm(x: Vectors, gain: Vectors, bias: Vectors, eps: float = 1e-12) -> Vectors:
    import numpy as np

    mean = x.mean(axis=-1, keepdims=True)
    centred = x - mean
    variance = (centred * centred).mean(axis=-1, keepdims=True)
    normed: Vectors = centred / np.sqrt(variance + np.float32(eps)) * gain + bias
    return normed


def _gelu(x: Vectors) -> Vectors:
    """BERT's exact GELU, x·Φ(x), with erf from Abramowitz & Stegun 7.1.26 (error under 1.5e-7).

    In place wherever it can be: on a batch this is as costly as a matrix product otherwise.
    """
    import numpy as np

    f32 = np.float32
    z = np.abs(x)
    z *= f32(0.7071067811865476)
    t = z * f32(0.3275911)
    t += f32(1.0)
    np.reciprocal(t, out=t)
    p = t * f32(1.061405429)
    for coefficient in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):
        p += f32(coefficient)
        p *= t
    np.square(z, out=z)
    np.negative(z, out=z)
    np.exp(z, out=z)
    p *= z  # 1 - erf(|x|/√2)
    np.subtract(f32(1.0), p, out=p)
    np.copysign(p, x, out=p)  # erf(x/√2)
    p += f32(1.0)
    p *= x
    p *= f32(0.5)
    return p


def padded(batch: Sequence[Sequence[int]], mask_type: Any) -> tuple[Any, Any]:
    """Token ids as one zero-padded int64 matrix and its attention mask (1 on real tokens)."""
    import numpy as np

    length = max(len(ids) for ids in batch)
    tokens = np.zeros((len(batch), length), dtype=np.int64)
    mask = np.zeros((len(batch), length), dtype=mask_type)
    for row, ids in enumerate(batch):
        tokens[row, :len(ids)] = ids
        mask[row, :len(ids)] = 1
    return tokens, mask

