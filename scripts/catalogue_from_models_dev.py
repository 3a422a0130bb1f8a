#!/usr/bin/env python3
"""Regenerates crates/codeloop-provider/src/catalogue.json from a checkout of models.dev
(https://github.com/anomalyco/models.dev, MIT licence): the built-in providers' chat models with their
limits, prices (cache and >200k-token tiers), capabilities and reasoning options.

    git clone https://github.com/anomalyco/models.dev /tmp/models.dev
    python3 scripts/catalogue_from_models_dev.py /tmp/models.dev COMMIT > crates/codeloop-provider/src/catalogue.json

Needs Python 3.11 (tomllib). `base_model` inheritance is resolved as models.dev's own generator does:
the base file from `models/`, the provider file merged over it, `base_model_omit` removed.
"""

import copy
import json
import sys
import tomllib
from pathlib import Path

PROVIDERS = ["anthropic", "openai", "google", "deepseek", "groq", "xai", "moonshotai", "alibaba", "mistral"]
MODALITIES = {"text", "image", "pdf", "audio", "video"}


def merge(base, over):
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def omit(data, path):
    *parents, last = path.split(".")
    for key in parents:
        data = data.get(key, {})
    data.pop(last, None)


def load(root, path):
    data = tomllib.loads(path.read_text())
    base = data.pop("base_model", None)
    if base:
        data = merge(tomllib.loads((root / "models" / f"{base}.toml").read_text()), data)
    for field in data.pop("base_model_omit", []):
        omit(data, field)
    return data


def cost(raw):
    out = {"input": raw.get("input", 0), "output": raw.get("output", 0)}
    out.update({k: raw[k] for k in ("cache_read", "cache_write") if k in raw})
    for tier in raw.get("tiers", []):
        if tier.get("tier", {}).get("size") == 200_000:
            out["context_over_200k"] = cost({k: v for k, v in tier.items() if k != "tier"})
    return out


def model(model_id, raw):
    output = raw.get("modalities", {}).get("output", ["text"])
    if "text" not in output or not raw.get("tool_call", False):
        return None  # embeddings, image and speech models: nothing codeloop runs
    limit = {k: raw["limit"][k] for k in ("context", "input", "output") if k in raw["limit"]}
    entry = {
        "id": model_id,
        "name": raw.get("name", model_id),
        "reasoning": raw.get("reasoning", False),
        "tool_call": True,
        "temperature": raw.get("temperature", True),
        "modalities": {
            "input": [m for m in raw.get("modalities", {}).get("input", ["text"]) if m in MODALITIES],
            "output": [m for m in output if m in MODALITIES],
        },
        "limit": limit,
        "cost": cost(raw.get("cost", {})),
    }
    options = [o for o in raw.get("reasoning_options", []) if o.get("type") in ("effort", "budget_tokens", "toggle")]
    if entry["reasoning"] and options:
        entry["reasoning_options"] = options
    if raw.get("release_date"):
        entry["release_date"] = raw["release_date"]
    return entry


def main():
    root, commit = Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "unknown"
    catalogue = {"_source": {"from": "https://github.com/anomalyco/models.dev (MIT)", "commit": commit}}
    for provider in PROVIDERS:
        folder = root / "providers" / provider
        meta = tomllib.loads((folder / "provider.toml").read_text())
        models = {}
        for path in sorted((folder / "models").rglob("*.toml")):
            model_id = str(path.relative_to(folder / "models").with_suffix(""))
            entry = model(model_id, load(root, path))
            if entry:
                models[model_id] = entry
        catalogue[provider] = {"name": meta.get("name", provider), "models": models}
    lines = ["{"]
    items = list(catalogue.items())
    for p_index, (provider, entry) in enumerate(items):
        comma = "," if p_index + 1 < len(items) else ""
        if provider == "_source":
            lines.append(f'  "_source": {json.dumps(entry)}{comma}')
            continue
        lines.append(f'  {json.dumps(provider)}: {{"name": {json.dumps(entry["name"])}, "models": {{')
        models = list(entry["models"].items())
        for m_index, (model_id, info) in enumerate(models):
            tail = "," if m_index + 1 < len(models) else ""
            lines.append(f"    {json.dumps(model_id)}: {json.dumps(info, separators=(', ', ': '))}{tail}")
        lines.append(f"  }}}}{comma}")
    lines.append("}")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
