"""The brain by role: each role's fallback chain of (provider, model), over every configured provider.

`RoleBrain` is a `Brain` like the single Anthropic one, so the turn, the tool loop, triage and
compaction use it unchanged. `model_for(role)` names the role's first link as "provider:model";
a call given such a name (or a role's name) goes through that role's chain: when a provider fails
after its own retries, the next one answers, and the completion names the provider that did.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from bot.config import AnthropicConfig, Config
from bot.config.provider_sections import ROLE_NAMES, ProviderConfig, split_spec
from bot.core.errors import ModelError
from bot.core.misconfiguration import Misconfigurations
from bot.models.brain import (
    AnthropicBrain,
    Brain,
    BrainsByModel,
    Completion,
    FastCompleter,
    ReplyRequest,
    TextSink,
    tell,
)
from bot.models.voice import Transcribe

if TYPE_CHECKING:
    from bot.models.openai_brain import OpenAIBrain

log = structlog.get_logger("switchboard.brain")

Link = tuple[str, str]  # (provider name, model id)


class _Closable(Protocol):
    async def aclose(self) -> None: ...


class RoleBrain:
    """Every provider's brain, built when first used and closed with `aclose`.

    No SDK is imported here: each brain imports its own on its first call, in a thread, and the
    daemon starts those imports once its channels are up (`model_sdks_of`, `bot.models.sdks`).
    """

    def __init__(self, config: Config, *, misconfigured: Misconfigurations | None = None) -> None:
        self._config = config
        self._providers = config.all_providers()
        self._chains = {role: config.role_chain(role) for role in ROLE_NAMES}
        self._brains: dict[str, AnthropicBrain | OpenAIBrain] = {}
        self._misconfigured = misconfigured
        self._openai: type[OpenAIBrain] | None = None
        if any(settings.kind == "openai" for settings in self._providers.values()):
            from bot.models.openai_brain import OpenAIBrain

            self._openai = OpenAIBrain

    async def aclose(self) -> None:
        for brain in self._brains.values():
            await brain.aclose()

    def provider(self, name: str) -> AnthropicBrain | OpenAIBrain:
        """The brain of one provider (an Anthropic or an OpenAI-compatible endpoint)."""
        if name not in self._brains:
            settings = self._providers[name]
            if settings.kind == "openai":
                assert self._openai is not None  # imported at start for every openai-kind provider
                self._brains[name] = self._openai(name, settings, "", misconfigured=self._misconfigured)
            else:
                self._brains[name] = AnthropicBrain(_as_anthropic(self._config, name, settings),
                                                    self._api_key(name, settings), name=name,
                                                    misconfigured=self._misconfigured)
        return self._brains[name]

    def chain(self, role: str) -> list[Link]:
        return list(self._chains.get(role, []))

    def model_for(self, role: str) -> str:
        """A role's first link as "provider:model"; any other name passes through."""
        chain = self._chains.get(role)
        return f"{chain[0][0]}:{chain[0][1]}" if chain else role

    def fast_completer(self) -> FastCompleter | None:
        return self

    def route(self, model: str | None) -> list[Link]:
        """The links a call for `model` tries: a role's chain (by its name or its first link's
        name), one "provider:model", or a bare model id on the "anthropic" provider (the ids of
        [anthropic].models and of jobs, as before providers existed)."""
        if not model:
            return self.chain("main")
        if self._chains.get(model):
            return self.chain(model)
        for role in ROLE_NAMES:
            if self._chains[role] and model == self.model_for(role):
                return self.chain(role)
        name, rest = split_spec(model)
        if rest and name in self._providers:
            return [(name, rest)]
        return [("anthropic", model)]

    async def reply(self, request: ReplyRequest, on_text: TextSink | None = None) -> Completion:
        async def call(link: Link, deadline: float) -> Completion:
            return await self.provider(link[0]).reply(
                dataclasses.replace(request, model=link[1], deadline=deadline), on_text)

        return await self._through(self.route(request.model), request.deadline, call, on_text)

    async def complete(
        self, prompt: str, *, system: str, model: str, deadline: float, max_tokens: int = 256
    ) -> Completion:
        async def call(link: Link, until: float) -> Completion:
            return await self.provider(link[0]).complete(
                prompt, system=system, model=link[1], deadline=until, max_tokens=max_tokens)

        return await self._through(self.route(model), deadline, call, None)

    async def _through(
        self, links: list[Link], deadline: float, call: Callable[[Link, float], Awaitable[Completion]],
        on_text: TextSink | None,
    ) -> Completion:
        """Each link in turn until one answers; every link but the last gets at most its
        provider's timeout, so a dead first provider leaves the next one time to answer. When none
        does, a misconfigured link's error is raised before a passing one: fixing it would help."""
        failure: ModelError | None = None
        misconfigured: ModelError | None = None
        for position, link in enumerate(links):
            until = deadline
            if position < len(links) - 1:
                until = min(deadline, time.monotonic() + self._providers[link[0]].timeout)
            if position and failure is not None:
                tell(on_text, "")  # what the failed provider wrote is void
            try:
                completion = await call(link, until)
            except ModelError as exc:
                failure = exc
                if exc.problem is not None and misconfigured is None:
                    misconfigured = exc
                if position < len(links) - 1:
                    log.warning("provider failed; the next in the chain answers", provider=link[0],
                                model=link[1], next=links[position + 1][0], error=str(exc))
                continue
            return dataclasses.replace(completion, provider=link[0])
        failure = misconfigured or failure
        raise failure if failure is not None else ModelError("no provider configured for this role")

    async def transcribe(self, data: bytes, name: str, mime: str | None) -> str:
        """Voice to text through the `transcribe` chain (openai-kind providers, checked by the config)."""
        failure: Exception | None = None
        for provider, model in self.chain("transcribe"):
            brain = self.provider(provider)
            if isinstance(brain, AnthropicBrain):
                continue
            try:
                return await brain.transcribe(data, name, mime, model)
            except ModelError as exc:
                failure = exc
                log.warning("transcription failed on a provider", provider=provider, error=str(exc))
        raise failure if failure is not None else ModelError("no transcription provider")

    def pinned(self, model: str | None) -> Brain:
        """This brain with `model` (a role, "provider:model" or an id) for requests naming none:
        the brain of a scheduled job with its own `model`."""
        return _Pinned(self, model)

    def _api_key(self, name: str, settings: ProviderConfig) -> str | None:
        return self._config.anthropic.api_key() if name == "anthropic" and name not in \
            self._config.providers else settings.api_key()


class _Pinned:
    def __init__(self, brain: RoleBrain, model: str | None) -> None:
        self._brain = brain
        self._model = model

    async def reply(self, request: ReplyRequest, on_text: TextSink | None = None) -> Completion:
        if request.model is None and self._model is not None:
            request = dataclasses.replace(request, model=self._model)
        return await self._brain.reply(request, on_text)

    def fast_completer(self) -> FastCompleter | None:
        return self._brain

    def model_for(self, role: str) -> str:
        return self._brain.model_for(role)


def _as_anthropic(config: Config, name: str, settings: ProviderConfig) -> AnthropicConfig:
    """The AnthropicBrain's settings for a provider of kind "anthropic"."""
    if name == "anthropic" and name not in config.providers:
        return config.anthropic
    values: dict[str, Any] = {"timeout": settings.timeout, "max_retries": settings.max_retries,
                              "max_tokens": settings.max_tokens, "base_url": settings.base_url}
    if settings.api_key_env:
        values["api_key_env"] = settings.api_key_env
    return config.anthropic.model_copy(update=values)


def build_brain(
    config: Config, misconfigured: Misconfigurations | None = None
) -> tuple[Brain, _Closable]:
    """The daemon's brain: by role when [providers] or [roles] is set, else the one Anthropic
    brain; a refusal only the admin can fix is told to `misconfigured`."""
    if config.uses_providers():
        brain = RoleBrain(config, misconfigured=misconfigured)
        return brain, brain
    single = AnthropicBrain(config.anthropic, config.anthropic.api_key(), misconfigured=misconfigured)
    return single, single


def model_sdks_of(config: Config) -> list[str]:
    """The SDK modules the configured models are called through: imported ahead of the first call."""
    if not config.uses_providers():
        return ["anthropic"] if config.anthropic.api_key() else []
    providers = config.all_providers()
    return sorted({providers[name].kind if name in providers else "anthropic"
                   for role in ROLE_NAMES for name, _ in config.role_chain(role)})


class PinnedBrains:
    """The brain for a job's `model` when the brain is by role (`BrainsByModel` otherwise)."""

    def __init__(self, brain: RoleBrain) -> None:
        self._brain = brain

    def __call__(self, model: str | None) -> Brain:
        return self._brain.pinned(model)

    async def __aenter__(self) -> PinnedBrains:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


def brains_by_model(
    brain: Brain, config: Config
) -> AbstractAsyncContextManager[Callable[[str | None], Brain]]:
    """The brain for each job's `model`, as an async context manager closing what it built."""
    return PinnedBrains(brain) if isinstance(brain, RoleBrain) else BrainsByModel(brain, config.anthropic)


def transcriber_of(brain: Brain | None) -> Transcribe | None:
    """Voice to text when the brain has a `transcribe` role; None: voice notes stay placeholders."""
    if isinstance(brain, RoleBrain) and brain.chain("transcribe"):
        return brain.transcribe
    return None
