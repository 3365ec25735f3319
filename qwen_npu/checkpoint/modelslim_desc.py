"""The answers the ModelSlim fixes and preflight ask of a ``quant_model_description.json``.

Which scheme a fused-MoE layer gets under SGLang 0.5.23's lookup (two naming conventions, several
prefix candidates), whether every expert or every ``mtp.*`` entry is ``FLOAT``: one standard-library
home so the patch and the preflight cannot disagree. Errors repeat SGLang's own wording.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

#: Schemes SGLang 0.5.23 has a fused-MoE implementation for (static ``W8A8`` is linear-only).
MOE_SCHEMES: frozenset[str] = frozenset(
    {"W4A4_MXFP4", "W4A8_MXFP", "W4A4_DYNAMIC", "W4A8_DYNAMIC", "W8A8_DYNAMIC", "W8A8_MXFP8"}
)
#: Schemes a ModelSlim description may map a tensor to (``FLOAT`` = stored unquantized).
KNOWN_SCHEMES: frozenset[str] = MOE_SCHEMES | {"FLOAT", "W8A8"}
#: Top-level keys that describe the file rather than a tensor.
METADATA_KEYS: frozenset[str] = frozenset(
    {"version", "model_quant_type", "group_size", "is_rot_used", "metadata", "optional"}
    | {"fa_quant_type", "kv_cache_type", "ignore", "packed_modules_mapping"}
)
#: Expert projection names, in SGLang's probing order: (gate, up, down).
NAMING_CONVENTIONS: tuple[tuple[str, str, str], ...] = (
    ("gate_proj", "up_proj", "down_proj"),
    ("w1", "w3", "w2"),
)
_EXPERT_KEY = re.compile(r"^(.*)\.(\d+)\.(gate_proj|up_proj|down_proj|w1|w2|w3)\.weight$")
_MTP_ROOTS = ("mtp.", "language_model.mtp.", "model.mtp.", "model.language_model.mtp.")


def tensor_entries(desc: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    """The (tensor name, scheme) pairs of a description, metadata keys left out."""
    for key, value in desc.items():
        if key not in METADATA_KEYS:
            yield key, value


def moe_prefix_candidates(prefix: str) -> list[str]:
    """The layer names SGLang 0.5.23 tries for a fused-MoE prefix, in its order.

    The prefix itself; its ``block_sparse_moe`` spelling when it says ``mlp``; and each of those
    with the ``language_model.`` root added (or removed when present).
    """
    names = [prefix]
    if ".mlp." in prefix:
        names.append(prefix.replace(".mlp.", ".block_sparse_moe."))
    for name in tuple(names):
        lm = "language_model."
        names.append(name[len(lm) :] if name.startswith(lm) else lm + name)
    return list(dict.fromkeys(names))


@dataclass(frozen=True)
class MoeSchemes:
    """Expert 0's schemes for one fused-MoE layer as SGLang resolves them."""

    prefix: str  # the candidate name under which the entries were found
    convention: tuple[str, str, str]  # (gate, up, down) projection names
    w13: dict[str, str]  # gate/up key -> scheme, only the keys present
    w2_key: str
    w2: str

    @property
    def w13_complete(self) -> bool:
        return len(self.w13) == 2


def find_moe_schemes(desc: Mapping[str, Any], prefix: str) -> MoeSchemes | None:
    """The first candidate and naming convention with a W13 entry and a W2 entry, else None."""
    for candidate in moe_prefix_candidates(prefix):
        for gate, up, down in NAMING_CONVENTIONS:
            w2_key = f"{candidate}.0.{down}.weight"
            if w2_key not in desc:
                continue
            w13 = {
                key: desc[key]
                for key in (f"{candidate}.0.{gate}.weight", f"{candidate}.0.{up}.weight")
                if key in desc
            }
            if w13:
                return MoeSchemes(candidate, (gate, up, down), w13, w2_key, desc[w2_key])
    return None


def _missing_message(desc: Mapping[str, Any], prefix: str) -> str:
    tried = []
    for candidate in moe_prefix_candidates(prefix):
        for gate, up, down in NAMING_CONVENTIONS:
            has_w13 = any(f"{candidate}.0.{n}.weight" in desc for n in (gate, up))
            has_w2 = f"{candidate}.0.{down}.weight" in desc
            tried.append(
                f"{candidate} ({gate}/{up}={'found' if has_w13 else 'missing'}, "
                f"{down}={'found' if has_w2 else 'missing'})"
            )
    return f"Missing ModelSlim MoE quantization description for layer {prefix}: " + "; ".join(tried)


_index_cache: tuple[Mapping[str, Any], int, dict[tuple[str, str], set[str]]] | None = None


def _expert_schemes(desc: Mapping[str, Any]) -> dict[tuple[str, str], set[str]]:
    """(layer name, projection) -> the schemes over all experts, built in one pass and kept per
    description object (SGLang builds the config once per process)."""
    global _index_cache
    if _index_cache is not None and _index_cache[0] is desc and _index_cache[1] == len(desc):
        return _index_cache[2]
    schemes: dict[tuple[str, str], set[str]] = {}
    for key, value in desc.items():
        match = _EXPERT_KEY.match(key) if key.endswith(".weight") else None
        if match is not None:
            schemes.setdefault((match[1], match[3]), set()).add(str(value))
    _index_cache = (desc, len(desc), schemes)
    return schemes


def all_experts_float(desc: Mapping[str, Any], found: MoeSchemes) -> bool:
    """True when every expert (not only expert 0) of the resolved layer is FLOAT."""
    schemes = _expert_schemes(desc)
    return all(schemes.get((found.prefix, p)) == {"FLOAT"} for p in found.convention)


def moe_all_float(desc: Mapping[str, Any], prefix: str) -> bool:
    """Never raises: True only when gate, up and down of every expert are explicitly FLOAT.

    The runtime patch uses this to decide the fallback; everything else (missing, mixed,
    unsupported) goes to SGLang's own code, which raises its own errors.
    """
    found = find_moe_schemes(desc, prefix)
    if found is None or not found.w13_complete:
        return False
    if any(v != "FLOAT" for v in found.w13.values()) or found.w2 != "FLOAT":
        return False
    return all_experts_float(desc, found)


def moe_layer_is_unquantized(desc: Mapping[str, Any], prefix: str) -> bool:
    """True for an all-FLOAT layer, False for a supported quantized one, else ValueError.

    The ValueError messages are SGLang 0.5.23's (missing, mismatched W13, unsupported schemes).
    """
    found = find_moe_schemes(desc, prefix)
    if found is None:
        raise ValueError(_missing_message(desc, prefix))
    if len({str(v) for v in found.w13.values()}) > 1:
        raise ValueError(
            f"Mismatched ModelSlim quantization for W13 in layer {prefix}: {found.w13}"
        )
    w13 = next(iter(found.w13.values()))
    if found.w13_complete and w13 == "FLOAT" and found.w2 == "FLOAT":
        if all_experts_float(desc, found):
            return True
        raise ValueError(
            f"Mixed ModelSlim MoE schemes across the experts of layer {prefix}: expert 0 is "
            "FLOAT but another expert is quantized; every expert must use one scheme"
        )
    if w13 not in MOE_SCHEMES or found.w2 not in MOE_SCHEMES:
        raise ValueError(
            f"Unsupported ModelSlim MoE schemes for layer {prefix}: W13='{w13}', W2='{found.w2}'"
        )
    return False


def mtp_entries(desc: Mapping[str, Any]) -> dict[str, Any]:
    """The description's entries for the MTP (draft) module: tensor names under ``mtp.``."""
    return {k: v for k, v in tensor_entries(desc) if k.startswith(_MTP_ROOTS)}


def mtp_is_all_float(desc: Mapping[str, Any]) -> bool:
    """True when the description has MTP entries and every one of them is FLOAT."""
    entries = mtp_entries(desc)
    return bool(entries) and all(v == "FLOAT" for v in entries.values())
