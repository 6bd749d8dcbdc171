"""`[providers.<name>]` and `[roles]`: which model services the agent may use, and for what.

A provider is one endpoint (Anthropic, or anything speaking OpenAI's Chat Completions: Ollama,
llama.cpp, vLLM, LM Studio, OpenRouter, OpenAI). A role names `provider:model`, or a list of them
tried in order (a fallback chain). The `[anthropic]` section stays the provider named "anthropic"
unless a `[providers.anthropic]` section replaces it, so a config without these sections works
as before.
"""

from __future__ import annotations

import os
import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BeforeValidator, Field

from bot.config.fields import MAX_REPLY_TOKENS, EnvName, HttpUrl, NonNegInt, PosFloat, PosInt, Section
from bot.config.sections import AnthropicConfig, ModelPrice

ProviderName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_-]*$")]
ROLE_NAMES = ("main", "fast", "summary", "transcribe")
_SPEC = re.compile(r"^([a-z][a-z0-9_-]*):([A-Za-z0-9][A-Za-z0-9_.:@/-]*)$")
OPENAI_URL = "https://api.openai.com/v1"


def _spec(value: str) -> str:
    if not _SPEC.match(value):
        raise ValueError("a provider:model pair, such as 'anthropic:claude-sonnet-5-5' or 'local:qwen3'")
    return value


# "provider:model": the provider's name (a [providers.<name>] section, or "anthropic") and a model id.
RoleSpec = Annotated[str, AfterValidator(_spec)]


def _as_list(value: object) -> object:
    return [value] if isinstance(value, str) else value


# One spec, or a list tried in order; held as a list.
RoleChain = Annotated[list[RoleSpec], BeforeValidator(_as_list)]


def split_spec(spec: str) -> tuple[str, str]:
    """("local", "qwen3") from "local:qwen3" (the model id may itself hold colons: "qwen3:8b")."""
    provider, _, model = spec.partition(":")
    return provider, model


class ProviderModel(Section):
    """What is known about one of a provider's models: its window and what it costs."""

    context_window: PosInt | None = None
    price: ModelPrice | None = None


class ProviderConfig(Section):
    kind: Literal["anthropic", "openai"]
    # Unset: Anthropic's own API, or api.openai.com for kind "openai". A local server: its /v1 URL.
    base_url: HttpUrl | None = None
    # Unset: no key is sent (local servers need none).
    api_key_env: EnvName | None = None
    timeout: PosFloat = 60.0
    max_retries: NonNegInt = 2
    max_tokens: Annotated[int, Field(ge=1, le=MAX_REPLY_TOKENS)] = 1024
    models: dict[str, ProviderModel] = Field(default_factory=dict)

    def api_key(self) -> str | None:
        return os.environ.get(self.api_key_env) or None if self.api_key_env else None

    def url(self) -> str | None:
        return self.base_url or (OPENAI_URL if self.kind == "openai" else None)


class RolesConfig(Section):
    """Per role, `provider:model` or a list of them tried in order. Unset: main and fast are the
    [anthropic] section's model and fast_model, summary is fast, transcribe is off."""

    main: RoleChain | None = None
    fast: RoleChain | None = None
    summary: RoleChain | None = None
    transcribe: RoleChain | None = None


def anthropic_provider(section: AnthropicConfig) -> ProviderConfig:
    """The `[anthropic]` section as the provider named "anthropic"."""
    return ProviderConfig(
        kind="anthropic", base_url=section.base_url, api_key_env=section.api_key_env,
        timeout=section.timeout, max_retries=section.max_retries, max_tokens=section.max_tokens,
    )
