"""THE patch list: one ``PatchInfo`` ledger entry per runtime patch.

Why this exists: the import hook, ``qwen-npu patches``, the sidecar, the dashboards and the docs all
need the same names and targets: one table (checked by a test against the modules on disk), so no
hand-numbered ledger drifts.
Standard library only; importing this module imports no patch and no SGLang code.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from qwen_npu.constants import UNKNOWN as UNKNOWN  # one of this module's verdicts too

UPSTREAM_PR = "https://github.com/sgl-project/sglang/pull/34353"
#: Where the fixes live, one module per entry, named after it.
FIXES_PACKAGE = "qwen_npu.patches.fixes"

#: The states a patch can be in (docs/architecture.md). ``unknown`` is for readers without data.
STATES: tuple[str, ...] = ("applied", "disabled", "upstream-fixed", "drifted", "target-missing")
OK_STATES: frozenset[str] = frozenset({"applied", "upstream-fixed"})
#: Comma-separated patch names (or ``all``) that are not applied.
ENV_DISABLE = "QWEN_NPU_DISABLE_PATCHES"


@dataclass(frozen=True)
class Serves:
    """The engine modes whose code a patch fixes (``modes.uses``): the MTP settings, the SSM state
    dtypes it changes anything for (None: every one), and whether it fixes the MTP draft only
    while the draft inherits the target's quantization (not with ``...-quantization unquant``)."""

    mtp: tuple[bool, ...] = (True, False)
    state_dtypes: tuple[str, ...] | None = None
    inherited_draft_only: bool = False
    why: str = "every mode runs the code it fixes"


@dataclass(frozen=True)
class PatchInfo:
    """A ledger entry; what the patch changes, why and when to drop it are its module's top block
    (``qwen-npu patches explain``)."""

    name: str  # the contract name (docs/architecture.md, "Patch names and states")
    target: str  # "module:Qualname" of what the patch rebinds
    upstream_pr: str = UPSTREAM_PR  # the pull request these patches follow
    serves: Serves = Serves()
    #: SGLang modules besides the target's that must be loaded before the patch applies.
    also_waits_for: tuple[str, ...] = ()

    @property
    def module(self) -> str:
        """Our module holding ``apply()``: ``qwen_npu/patches/fixes/<name with underscores>.py``."""
        return f"{FIXES_PACKAGE}.{self.name.replace('-', '_')}"

    @property
    def triggers(self) -> tuple[str, ...]:
        """The modules that must all be loaded before it applies (the start-up hook waits)."""
        return (self.target.partition(":")[0], *self.also_waits_for)


def _draft_fix(why: str) -> Serves:
    """What a fix of the MTP draft serves: MTP on, while the draft inherits the quantization."""
    return Serves(mtp=(True,), inherited_draft_only=True, why=why)


PATCHES: tuple[PatchInfo, ...] = (
    PatchInfo(
        name="modelslim-moe-unquant-fallback",
        target="sglang.srt.layers.quantization.modelslim.modelslim:ModelSlimConfig.get_quant_method",
        serves=_draft_fix(
            "the all-FLOAT fused-MoE layer of these checkpoints is the MTP draft's, built "
            "with the target's ModelSlim config only while the draft inherits --quantization"
        ),
        # the fallback returns FusedMoE's unquantized method: FusedMoE must be importable
        also_waits_for=("sglang.srt.layers.moe.fused_moe_triton",),
    ),
    PatchInfo(
        name="mtp-modelslim-unquant",
        target="sglang.srt.models.qwen3_5_mtp:_mtp_quant_config",
        serves=_draft_fix(
            "the draft is built only with MTP on; with --speculative-draft-model-quantization "
            "unquant SGLang itself drops the draft's quant config on NPU"
        ),
    ),
    PatchInfo(
        name="mamba-scatter-ub-aware",
        target=(
            "sglang.srt.hardware_backend.npu.attention.ascend_hybrid_linear_attn_backend:"
            "move_intermediate_cache"
        ),
        serves=Serves(
            mtp=(True,),
            state_dtypes=("float32", "float16"),
            why=(
                "the scatter runs after MTP verify only; at a bf16 128x128 state (every Qwen3.5/"
                "3.6 shape) the plan is the kernel's default h_block_size 2: fp32 states "
                "(Ascend950) and wider ones need it"
            ),
        ),
    ),
    PatchInfo(
        name="gdn-decode-state-layout",
        target="sglang.srt.layers.attention.linear.kernels.gdn_triton:TritonGDNKernel.decode",
        serves=Serves(
            mtp=(False,),
            why=(
                "under NEXTN the target's GDN layers run extend and target-verify only; the Triton "
                "decode kernel runs only without speculation"
            ),
        ),
    ),
)

BY_NAME: dict[str, PatchInfo] = {p.name: p for p in PATCHES}


@dataclass(frozen=True)
class ContractLink:
    """One link of the GDN state contract (``gdn_contract``): who holds the SSM state how;
    whether ``patches verify --strict`` fails when it cannot be read, and why so."""

    name: str
    what: str
    unknown_fails_strict: bool
    unknown_why: str
    #: The MTP settings whose code the link reads (``modes.link_used``).
    serves_mtp: tuple[bool, ...] = (True, False)


#: The links, in the order of ``gdn_contract`` everywhere (verify, log, state file, sidecar).
GDN_CONTRACT: tuple[ContractLink, ...] = (
    ContractLink(
        "pool_layout",
        "SGLang's MambaPool, built on CPU in its NPU configuration: contiguous [.., HV, V, K] "
        "temporal and intermediate states (V-major), no transpose view",
        True,
        "it needs only SGLang and torch, which every engine image has",
    ),
    ContractLink(
        "prefill_op",
        "the extend path's chunk op (AscendC torch.ops.npu.chunk_gated_delta_rule, V-major) "
        "against the pool's order; a Triton chunk with a V-major pool is SGLang #40398's pair",
        True,
        "it reads SGLang's own source",
    ),
    ContractLink(
        "verify_op",
        "the MTP verify op (AscendC torch.ops.npu.recurrent_gated_delta_rule: raw pointer, "
        "V-major, bf16 state only) against the pool's order",
        True,
        "it reads SGLang's own source",
        (True,),
    ),
    ContractLink(
        "mover",
        "move_intermediate_cache: a source-order copy, or a stride-honouring one (wrong only "
        "with a transposed pool view: sgl-kernel-npu #748's pair)",
        True,
        "it reads sgl-kernel-npu's Python source, which the image installs",
        (True,),
    ),
    ContractLink(
        "decode_kernel",
        "the installed plain-decode kernel's state addressing against the pool's (with "
        "gdn-decode-state-layout when it is K-major)",
        False,
        "only an NPU image has the Triton decode kernel's file; a CPU check says what is missing",
        (False,),
    ),
    ContractLink(
        "ssm_dtype",
        "the SSM state dtype resolved as SGLang resolves it (--mamba-ssm-dtype, "
        "SGLANG_MAMBA_SSM_DTYPE, config.json mamba_ssm_dtype, float32) against the chip "
        "(QWEN_NPU_CHIP): bfloat16 on 910B and A3, and for MTP verify everywhere",
        False,
        "an image build has no model and no command line; the engine's start-up log has both",
    ),
)
CONTRACT_VERDICTS: tuple[str, str, str] = ("pass", "fail", UNKNOWN)


def get_patch(name: str) -> PatchInfo:
    """The ledger entry for ``name``; KeyError naming the known patches otherwise."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown patch {name!r}; known: {', '.join(BY_NAME)}") from None


def disable_requests(environ: Mapping[str, str]) -> frozenset[str]:
    """The names in ``QWEN_NPU_DISABLE_PATCHES`` (comma-separated; ``all``: every patch), the one
    parser of the kill switch (the patches, ``qwen-npu patches`` and preflight)."""
    return frozenset(n.strip() for n in environ.get(ENV_DISABLE, "").split(",") if n.strip())


def disabled_patches(environ: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """(disabled patch names in ledger order, requested names that are no patch)."""
    names = disable_requests(environ)
    unknown = sorted(n for n in names if n != "all" and n not in BY_NAME)
    return [p.name for p in PATCHES if p.name in names or "all" in names], unknown
