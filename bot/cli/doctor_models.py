"""`doctor`'s model checks: each provider's key accepted and each configured model known, with one
cheap authenticated call per model (Anthropic's Models API) or per provider (an OpenAI-compatible
server's model list). Nothing is generated, so nothing is spent.

The SDKs are imported inside the checks: only a provider that is configured loads its library.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bot.cli.finding import Finding, failed, listed, passed, plural
from bot.config.provider_sections import ROLE_NAMES, ProviderConfig, split_spec
from bot.core.errors import describe

if TYPE_CHECKING:
    from bot.config import Config

# provider name -> model id -> the config keys that name it (where a fix would go)
Uses = dict[str, dict[str, list[str]]]

_ROLE_DEFAULTS = {"main": "anthropic.model", "fast": "anthropic.fast_model",
                  "summary": "anthropic.fast_model"}


def model_uses(config: Config) -> Uses:
    """Every model the config can call, by provider, with the keys that name it: each agent's role
    chains, `[anthropic].models`, jobs' and triage's and compaction's own models."""
    providers = config.all_providers()
    uses: Uses = {}

    def add(spec: str, where: str) -> None:
        name, model = split_spec(spec)
        if not (model and name in providers):
            name, model = "anthropic", spec  # a bare model id runs on the "anthropic" provider
        keys = uses.setdefault(name, {}).setdefault(model, [])
        if where not in keys:
            keys.append(where)

    for role in ROLE_NAMES:
        where = f"roles.{role}" if getattr(config.roles, role) is not None else _ROLE_DEFAULTS.get(role, "")
        for name, model in config.role_chain(role):
            add(f"{name}:{model}", where)
        for index, agent in enumerate(config.agents):  # an agent's own [agents.roles]
            if role in agent.roles.model_fields_set:
                for name, model in config.for_agent(agent.id).role_chain(role):
                    add(f"{name}:{model}", f"agents[{index}].roles.{role}")
    for short, spec in config.anthropic.models.items():
        add(spec, f"anthropic.models.{short}")
    for index, job in enumerate(config.schedules):
        if job.model and job.model not in ROLE_NAMES:
            add(job.model, f"schedules[{index}].model")
    for where, choice in (("conversation.selection_model", config.conversation.selection_model),
                          ("compaction.model", config.compaction.model)):
        if choice not in ("fast", "main"):
            add(choice, where)
    return uses


async def check_provider(config: Config, name: str, models: dict[str, list[str]], timeout: float) -> Finding:
    """The provider's key accepted and each of `models` known to it."""
    settings = config.all_providers()[name]
    label = f"provider {name}"
    env = settings.api_key_env
    if settings.kind == "anthropic" and not env:
        return failed(label, "no api_key_env names the variable holding its key",
                      f"set providers.{name}.api_key_env and export the key there")
    if env and not settings.api_key():
        return failed(label, f"environment variable {env} is not set",
                      f"export the API key in {env} (a service: in its environment file)")
    if settings.kind == "anthropic":
        return await _anthropic(label, settings, models, timeout)
    return await _openai(label, name, settings, models, timeout)


async def _anthropic(label: str, settings: ProviderConfig, models: dict[str, list[str]],
                     timeout: float) -> Finding:
    import anthropic

    env = settings.api_key_env
    where = settings.base_url or "api.anthropic.com"
    client = anthropic.AsyncAnthropic(api_key=settings.api_key(), base_url=settings.base_url,
                                      max_retries=0, timeout=timeout)
    try:
        async with client:
            unknown: list[str] = []
            for model in models:
                try:
                    await client.models.retrieve(model)
                except anthropic.NotFoundError:
                    unknown.append(model)
            offered = [info.id for info in (await client.models.list(limit=20)).data] if unknown else []
    except anthropic.AuthenticationError as exc:
        return failed(label, f"the key in {env} was refused ({_anthropic_error(exc)})",
                      f"put a valid key in {env} (console.anthropic.com → Settings → API keys)")
    except anthropic.PermissionDeniedError as exc:
        return failed(label, f"the key in {env} may not list models ({_anthropic_error(exc)})",
                      "use a key of a workspace allowed to use these models")
    except anthropic.APIStatusError as exc:
        return failed(label, f"{where} answered {_anthropic_error(exc)}",
                      "if this persists, see status.anthropic.com or check anthropic.base_url")
    except anthropic.APIConnectionError as exc:
        return failed(label, f"cannot reach {where} ({_cause(exc)})",
                      "check the network, a proxy, or the provider's base_url")
    if unknown:
        return failed(label, f"{_named(unknown, models)} unknown to {where} (HTTP 404 not_found_error)",
                      "set a model id this key can use" + (f": {listed(offered)}" if offered else ""))
    return passed(label, f"key in {env} accepted; {_known(models)}")


async def _openai(label: str, name: str, settings: ProviderConfig, models: dict[str, list[str]],
                  timeout: float) -> Finding:
    import openai

    url = settings.url() or ""
    env = settings.api_key_env
    # Local servers want no key, but the SDK refuses to start without one (as bot.models.openai_brain).
    client = openai.AsyncOpenAI(api_key=settings.api_key() or "no-key", base_url=url, max_retries=0,
                                timeout=timeout)
    try:
        async with client:
            served = [model.id for model in (await client.models.list()).data]
    except openai.AuthenticationError as exc:
        detail = f"the key in {env} was refused" if env else "the server wants a key and none is set"
        return failed(label, f"{detail} ({_openai_error(exc)})",
                      f"put a valid key in {env}" if env else f"set providers.{name}.api_key_env and "
                      "export the key there")
    except openai.NotFoundError as exc:
        return failed(label, f"no model list at {url}/models ({_openai_error(exc)})",
                      f"check providers.{name}.base_url (OpenAI-compatible servers answer at …/v1/models)")
    except openai.APIStatusError as exc:
        return failed(label, f"{url} answered {_openai_error(exc)}", "check the server and its logs")
    except openai.APIConnectionError as exc:
        return failed(label, f"cannot reach {url} ({_cause(exc)})",
                      f"start the server, or check providers.{name}.base_url")
    missing = [model for model in models if model not in served]
    if missing:
        fix = f"set a model it serves: {listed(served)}" if served else "load the model on the server"
        return failed(label, f"{_named(missing, models)} not served by {url}", fix)
    keyed = f"key in {env} accepted" if env else "answers (no key)"
    return passed(label, f"{keyed}; {_known(models)}")


def _named(ids: list[str], models: dict[str, list[str]]) -> str:
    """ "model x (set in roles.main)", or several of them, saying where each is set."""
    parts = [f"{model} (set in {', '.join(models[model])})" for model in ids]
    return f"{'model' if len(ids) == 1 else 'models'} {'; '.join(parts)}"


def _known(models: dict[str, list[str]]) -> str:
    if not models:
        return "no model of it is used"
    return f"{plural(len(models), 'model')} known: {listed(list(models))}"


def _anthropic_error(exc: Any) -> str:
    kind = getattr(exc, "type", None)
    message = getattr(exc, "api_message", None)
    return f"HTTP {exc.status_code}" + (f" {kind}" if kind else "") + (f": {message}" if message else "")


def _openai_error(exc: Any) -> str:
    body = exc.body if isinstance(exc.body, dict) else {}  # the SDK keeps the body's "error" object
    message = body.get("message")
    return f"HTTP {exc.status_code}" + (f": {message}" if message else "")


def _cause(exc: BaseException) -> str:
    """The root of a connection failure, in one line."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return " ".join(describe(exc).split()) if str(exc) else type(exc).__name__
