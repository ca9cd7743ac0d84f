"""Typed configs from plain YAML: base recipe + experiment overlay + key=value overrides.

A recipe is a YAML file (or the name of a shipped one). It may name `base:` recipes that it
extends; `--experiment NAME` overlays `experiments/NAME.yaml`; `a.b=value` overrides come last.
Every key is checked against the dataclass schema, and a user mistake raises ConfigError naming
the key, the file it came from and the nearest valid key, so CLIs can print one line and exit 2.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import difflib
import functools
import os
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal

import yaml

from speechlm.config.schema import Config, ConfigError

# this file is speechlm/config/loader.py: the shipped recipes are speechlm/recipes/
PACKAGE_RECIPES = Path(__file__).parent.parent / "recipes"
REPO_ROOT = Path(__file__).resolve().parent.parent.parent


def find_recipe(name_or_path: str, search: list[Path] | None = None) -> Path:
    """A path to a YAML file, or the name of one in `search` dirs / the shipped recipes."""
    p = Path(name_or_path).expanduser()
    if p.suffix in (".yaml", ".yml") or os.sep in name_or_path:
        if p.is_file():
            return p.resolve()
        raise ConfigError(f"config file not found: {name_or_path}")
    dirs = list(search or []) + [PACKAGE_RECIPES]
    for d in dirs:
        for ext in (".yaml", ".yml"):
            if (d / f"{name_or_path}{ext}").is_file():
                return (d / f"{name_or_path}{ext}").resolve()
    known = sorted({f.stem for d in dirs if d.is_dir() for f in d.glob("*.y*ml")})
    raise ConfigError(f"unknown recipe '{name_or_path}'{_nearest(name_or_path, known)}; known: {', '.join(known)}")


def _read_yaml(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a recipe must be a mapping of keys, got {type(data).__name__}")
    return data


def _merge(dst: dict, src: dict, origin: dict, source: str, prefix: str = "") -> None:
    for k, v in src.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and isinstance(dst.get(k), dict):
            _merge(dst[k], v, origin, source, key + ".")
        else:
            dst[k] = v
            origin[key] = source


def _load_tree(path: Path, tree: dict, origin: dict, seen: tuple = ()) -> None:
    if path in seen:
        raise ConfigError(f"{path}: recipes include each other in a cycle")
    data = _read_yaml(path)
    bases = data.pop("base", None) or []
    for b in [bases] if isinstance(bases, str) else bases:
        _load_tree(find_recipe(b, [path.parent]), tree, origin, seen + (path,))
    _merge(tree, data, origin, str(path))


def parse_override(text: str) -> tuple[str, Any]:
    if "=" not in text or text.startswith("="):
        raise ConfigError(f"override '{text}' is not of the form key.sub=value")
    key, raw = text.split("=", 1)
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        value = raw
    return key.strip(), value


def load_tree(
    recipe: str | Path | None,
    experiment: str | None = None,
    overrides: list[str] | tuple = (),
    default: str = "production",
) -> tuple[dict, dict]:
    """Merged raw mapping and a map of dotted key -> the file (or 'command line') that set it."""
    tree: dict = {}
    origin: dict = {}
    path = find_recipe(str(recipe or default))
    _load_tree(path, tree, origin)
    if experiment:
        dirs = [path.parent / "experiments", PACKAGE_RECIPES / "experiments"]
        _load_tree(find_recipe(experiment, dirs), tree, origin)
    for text in overrides:
        key, value = parse_override(text)
        _set(tree, key, value, text)
        origin[key] = "command line"
    return tree, origin


def _set(tree: dict, key: str, value, text: str) -> None:
    """Set dotted `key` in the raw tree. In a list, a component is an index into an existing
    element (data.train.0.weight=2); the element's fields are type-checked later by `build`."""
    parts = key.split(".")
    node: Any = tree
    for n, p in enumerate(parts):
        if isinstance(node, list):
            p = _index(node, p, key, ".".join(parts[:n]))
        elif not isinstance(node, dict):
            raise ConfigError(f"override '{text}': '{parts[n - 1]}' is not a section")
        if n == len(parts) - 1:
            node[p] = value
        else:
            node = node[p] if isinstance(node, list) else node.setdefault(p, {})


def _index(seq: list, p: str, key: str, name: str) -> int:
    i = int(p) if re.fullmatch(r"-?[0-9]+", p) else None
    if i is None or not 0 <= i < len(seq):
        what = f"'{p}' is not an index" if i is None else f"index {i} out of range"
        raise ConfigError(
            f"override '{key}': {what}, {name} is a list of {len(seq)} element{'' if len(seq) == 1 else 's'}"
        )
    return i


def _nearest(word: str, options) -> str:
    m = difflib.get_close_matches(word, list(options), n=1, cutoff=0.5)
    return f" (did you mean '{m[0]}'?)" if m else ""


def set_by(key: str, origin: dict) -> str | None:
    """The file (or 'command line') that set `key`: the most specific origin recorded for it or one of
    its parents; errors name a list element data.train[0], an override names it data.train.0."""
    parts = key.replace("[", ".").replace("]", "").split(".")
    for i in range(len(parts), 0, -1):
        src = origin.get(".".join(parts[:i]))
        if src:
            return src
    return None


def origin_of(cfg, key: str) -> str | None:
    """Who set `key` of a config `load` made (None for a config built in code, or a schema default)."""
    return set_by(key, getattr(cfg, "origin", None) or {})


def _where(key: str, origin: dict) -> str:
    src = set_by(key, origin)
    return f" (from {src})" if src else ""


def _bad(tp, value, key: str, origin: dict) -> ConfigError:
    return ConfigError(f"{key}: expected {_type_name(tp)}, got {value!r}{_where(key, origin)}")


def _coerce(tp, value, key: str, origin: dict):
    """`value` checked against (and, for numbers, converted to) type `tp`; a ConfigError names the key."""
    if tp is Any:
        return value
    org = typing.get_origin(tp)
    if org in (typing.Union, types.UnionType):
        return _coerce_union(tp, value, key, origin)
    if org is Literal:
        return _coerce_literal(tp, value, key, origin)
    if org is list:
        return _coerce_list(tp, value, key, origin)
    if org is dict:
        if not isinstance(value, dict):
            raise _bad(tp, value, key, origin)
        return value
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise _bad(tp, value, key, origin)
        return build(tp, value, origin, key)
    out = _scalar(tp, value)
    if out is _NOT:
        raise _bad(tp, value, key, origin)
    return out


def _coerce_union(tp, value, key: str, origin: dict):
    """The first member type that takes `value` (None for an optional type's null)."""
    args = typing.get_args(tp)
    if value is None and type(None) in args:
        return None
    for a in args:
        if a is type(None):
            continue
        try:
            return _coerce(a, value, key, origin)
        except ConfigError:
            pass
    raise _bad(tp, value, key, origin)


def _coerce_literal(tp, value, key: str, origin: dict):
    args = typing.get_args(tp)
    if value in args:
        return value
    raise ConfigError(
        f"{key}: must be one of {', '.join(map(repr, args))}, got {value!r}{_nearest(str(value), map(str, args))}{_where(key, origin)}"  # noqa: E501
    )


def _coerce_list(tp, value, key: str, origin: dict) -> list:
    """A list, each element coerced to the element type (named key[i] in errors)."""
    if isinstance(value, dict) and value and all(isinstance(k, str) and re.fullmatch(r"-?[0-9]+", k) for k in value):
        # an override indexed into a list that only the schema default holds, not a recipe
        raise ConfigError(
            f"{key}: no recipe sets this list, so an override cannot index into it; give the whole list ({key}=[...])"  # noqa: E501
        )
    if not isinstance(value, list):
        raise _bad(tp, value, key, origin)
    args = typing.get_args(tp)
    return [_coerce(args[0], v, f"{key}[{i}]", origin) for i, v in enumerate(value)] if args else value


_NOT = object()  # _scalar's "not a value of this type"


def _scalar(tp, value):
    """`value` as a bool, int, float or str (`tp`), or _NOT. Numbers convert only without loss
    (2.0 -> 2, not 2.5); a bool is never a number or a string."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is bool:
        return value if isinstance(value, bool) else _NOT
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        return int(value) if isinstance(value, float) and value.is_integer() else _NOT
    if tp is float:
        if number:
            return float(value)
        if isinstance(value, str):  # YAML reads 1e-3 as a string
            try:
                return float(value)
            except ValueError:
                return _NOT
        return _NOT
    if tp is str:
        return str(value) if number or isinstance(value, str) else _NOT
    return _NOT


def _type_name(tp) -> str:
    org = typing.get_origin(tp)
    if org in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if org is Literal:
        return "one of " + ", ".join(map(repr, typing.get_args(tp)))
    if org is list:
        return "a list"
    if tp is type(None):
        return "null"
    return getattr(tp, "__name__", str(tp))


# keys that moved to their one home: section -> {old key: where it lives now}
MOVED = {"training": {"use_lora": "model.use_lora"}}


def build(schema, raw: dict, origin: dict | None = None, prefix: str = ""):
    """Instantiate dataclass `schema` from a mapping, naming any bad key."""
    origin = origin or {}
    hints = typing.get_type_hints(schema)
    names = {f.name for f in dataclasses.fields(schema)}
    moved = MOVED.get(prefix, {})
    kwargs = {}
    for k, v in raw.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if k in moved:
            raise ConfigError(f"'{key}'{_where(key, origin)} is set in one place now: '{moved[k]}'")
        if k not in names:
            where = _where(key, origin)
            raise ConfigError(f"unknown key '{key}'{where}{_nearest(str(k), names)}")
        kwargs[k] = _coerce(hints[k], v, key, origin)
    missing = [
        f.name
        for f in dataclasses.fields(schema)
        if f.name not in kwargs and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ConfigError(f"missing required key '{prefix + '.' if prefix else ''}{missing[0]}'")
    return schema(**kwargs)


def load(
    schema=Config,
    recipe: str | Path | None = None,
    experiment: str | None = None,
    overrides: list[str] | tuple = (),
    default: str = "production",
):
    tree, origin = load_tree(recipe, experiment, overrides, default)
    cfg = build(schema, tree, origin)
    # who set each key: checks that depend on it (a data path against the data.recipe that would
    # build it) read it with origin_of; an attribute, not a field, so it is never saved with the config
    with contextlib.suppress(AttributeError, TypeError):  # a schema with __slots__ keeps none
        object.__setattr__(cfg, "origin", origin)
    validate = getattr(cfg, "validate", None)
    if validate:
        validate()
    return cfg


def to_dict(cfg) -> dict:
    return dataclasses.asdict(cfg)


def dump(cfg, path: str | Path) -> None:
    """Save the resolved config beside an output (it holds no secrets: tokens come from the env)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))


def command_parser(prog: str, description: str, examples: str) -> argparse.ArgumentParser:
    """The parser every `speechlm` subcommand starts from: its one-line description, and its examples
    kept as written under the options in --help."""
    return argparse.ArgumentParser(
        prog=prog, description=description, epilog=examples, formatter_class=argparse.RawDescriptionHelpFormatter
    )


def cli_errors(fn):
    """Turn user mistakes (ConfigError, missing files) into one line on stderr and exit status 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ConfigError as e:
            print(f"error: {e}", file=sys.stderr)
            sys.exit(2)

    return wrapper
