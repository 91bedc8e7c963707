"""Provider registries (embedders, answerers): a name maps to a class or to a ``"module:Class"``
string imported on first use, so an optional dependency only matters once that provider is
chosen -- the way simonw/llm treats its built-in models as just more plugins."""

from __future__ import annotations

import importlib


def resolve(registry: dict[str, type | str], name: str, kind: str) -> type:
    """The class registered under ``name``; an unknown name is a clear ``ValueError``."""
    try:
        entry = registry[name]
    except KeyError:
        raise ValueError(
            f"Unknown {kind} {name!r}; choose one of: {', '.join(sorted(registry))}"
        ) from None
    if isinstance(entry, str):
        module_name, _, attr = entry.partition(":")
        entry = getattr(importlib.import_module(module_name), attr)
        registry[name] = entry
    return entry
