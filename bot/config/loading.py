"""Reading config.toml: `load_config` and `parse_config`, and errors that name the file and the key."""

from __future__ import annotations

import math
import os
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from bot.config.agent_check import check_agents
from bot.config.env_file import apply_env_file
from bot.config.fields import MAX_INT, SECRET_IN_FILE
from bot.config.mcp_sections import duplicate_name
from bot.config.provider_check import check_roles, with_provider_prices
from bot.config.root import Config
from bot.config.shard_check import check_shards
from bot.config.webhook_check import check_webhooks
from bot.core.errors import ConfigError


def load_config(path: str | os.PathLike[str]) -> Config:
    """Read and validate a config file, raising ConfigError with the file and key on any problem;
    the variables of its env file (`[secrets] env_file`) not already set are put in the environment."""
    shown = str(path)
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise ConfigError(shown, None, "file not found") from None
    except OSError as exc:
        raise ConfigError(shown, None, f"cannot be read ({exc.strerror})") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(shown, None, f"is not valid TOML: {exc}") from None
    config = parse_config(data, shown)
    # Pin the file's folder now: relative paths in it must not depend on a later working directory.
    config = config.model_copy(update={"source": str(Path(path).absolute())})
    if config.secrets.env_file is not None:
        # Here, where every command and a reload read the file: each `*_env` name is then looked
        # up in the environment as before, wherever it is read.
        apply_env_file(config.resolve(config.secrets.env_file), shown)
    return config


def parse_config(data: dict[str, Any], source: str) -> Config:
    """Validate already-parsed TOML data; errors name `source` and the key path."""
    if "source" in data:
        raise ConfigError(source, "source", f"unknown key; expected one of: {_field_list(Config)}")
    for loc, number in _numbers(data):
        if isinstance(number, float) and not math.isfinite(number):
            raise ConfigError(source, _key_path(loc, data), f"expected a finite number (got {number})")
        if isinstance(number, int) and abs(number) > MAX_INT:
            raise ConfigError(source, _key_path(loc, data), f"expected a 64-bit integer (got {number})")
    try:
        config = Config.model_validate({**data, "source": source})
    except ValidationError as exc:
        raise _to_config_error(exc, source, data) from None
    seen: set[str] = set()
    for index, job in enumerate(config.schedules):
        if job.id in seen:
            key = _key_path(("schedules", str(index), "id"), data)
            raise ConfigError(source, key, f"a unique id; another [[schedules]] entry is {job.id!r}")
        seen.add(job.id)
        key_of = config.job_key(job)
        if key_of.provider.startswith("discord") and key_of.is_direct and job.chat is None:
            raise ConfigError(
                source, _key_path(("schedules", str(index), "chat"), data),
                "the DM channel id: a Discord DM is sent to its channel, which the key does not name",
            )
    check_agents(config, source, lambda loc: _key_path(loc, data))
    check_webhooks(config, source)
    check_shards(config, source)
    check_roles(config, source)
    config = with_provider_prices(config)
    if (duplicate := duplicate_name(config.mcp_servers)) is not None:
        index, name = duplicate
        key = _key_path(("mcp_servers", str(index), "name"), data)
        raise ConfigError(source, key, f"a unique name; another [[mcp_servers]] entry is {name!r}")
    return config


def _numbers(node: Any, loc: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], int | float]]:
    """Every number in parsed TOML with its key path, so out-of-range ones are refused anywhere."""
    if isinstance(node, dict):
        return [found for key, value in node.items() for found in _numbers(value, (*loc, str(key)))]
    if isinstance(node, list):
        return [found for index, value in enumerate(node) for found in _numbers(value, (*loc, str(index)))]
    if isinstance(node, int | float) and not isinstance(node, bool):
        return [(loc, node)]
    return []


def _to_config_error(exc: ValidationError, source: str, data: dict[str, Any] | None = None) -> ConfigError:
    error = exc.errors()[0]
    loc = tuple(str(part) for part in error["loc"])
    if loc[-1:] == ("[key]",):  # a table key that is not valid: name the key itself
        loc = loc[:-1]
    key = _key_path(loc, data)
    if error["type"] == "extra_forbidden":
        parent = _model_at(loc[:-1])
        expected = "unknown key"
        if parent is not None:
            expected += f"; expected one of: {_field_list(parent)}"
        return ConfigError(source, key, expected)
    message = str(error["msg"]).removeprefix("Value error, ")
    given = error.get("input")
    if error["type"] == "missing":
        return ConfigError(source, key, "required key is missing")
    shown = f" (got {given!r})" if not isinstance(given, dict) and error["type"] != SECRET_IN_FILE else ""
    return ConfigError(source, key, f"expected {_lower_first(message)}{shown}")


def _key_path(loc: tuple[str, ...], data: Any = None) -> str:
    """A dotted key; a list entry shows as `schedules[2] (id "daily")` so the entry can be found."""
    parts: list[str] = []
    node = data
    for part in loc:
        if isinstance(node, str) and part.isdigit():  # one value where a list is allowed (roles)
            continue
        if isinstance(node, list) and part.isdigit():
            node = node[int(part)] if int(part) < len(node) else None
            entry = f"[{part}]"
            # An entry is named by its id ([[schedules]]) or its name ([[mcp_servers]]).
            for label in ("id", "name"):
                if isinstance(node, dict) and isinstance(node.get(label), str):
                    entry += f' ({label} "{node[label]}")'
                    break
            parts[-1] += entry
            continue
        node = node.get(part) if isinstance(node, dict) else None
        parts.append(part if part.replace("_", "").isalnum() and not part.isdigit() else f'"{part}"')
    return ".".join(parts)


def _model_at(loc: tuple[str, ...]) -> type[BaseModel] | None:
    model: type[BaseModel] = Config
    index = 0
    while index < len(loc):
        field = model.model_fields.get(loc[index])
        if field is None:
            return None
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation
            index += 1
        elif getattr(annotation, "__origin__", None) is list:
            model = annotation.__args__[0]  # type: ignore[union-attr]
            index += 2  # skip the list index
        elif getattr(annotation, "__origin__", None) is dict:
            value_type = annotation.__args__[1]  # type: ignore[union-attr]
            model = value_type
            index += 2  # skip the dict key
        else:
            return None
    return model


def _field_list(model: type[BaseModel]) -> str:
    return ", ".join(name for name, field in model.model_fields.items() if not field.exclude)


def _lower_first(text: str) -> str:
    text = text.removeprefix("Input should be ")
    if text.startswith(("greater", "less")):
        text = "a value " + text
    if text.startswith("a valid dictionary"):
        text = "a table"
    if text.startswith("String should match pattern"):
        text = "a string matching" + text.removeprefix("String should match")
    return text[:1].lower() + text[1:]
