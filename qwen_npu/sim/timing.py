"""The simulator's timing model on paper: pure functions of a ``SimConfig``.

The engine prices its steps and prefills with them and draws acceptance from them; tests and tools
predict a closed loop's figures (``steady_state``) and where MTP stops paying (``crossover``). The
model and its calibration: docs/simulator.md ("The timing model", "Calibration").
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from qwen_npu.sim.config import SimConfig

DEFAULT_INPUT_LEN = 1024
DEFAULT_OUTPUT_LEN = 100

#: The upstream pull request's table (SGLang PR #34353: Qwen3.6-35B-A3B W8A8 on 910B TP2, NEXTN 3
#: steps / 4 draft tokens, sglang.benchmark.serving random-ids 1024 in / 100 out, 100 prompts):
#: concurrency -> (mean TPOT ms, output tokens/s, mean TTFT ms). The calibration target of the
#: profile qwen3.6-35b-a3b-910b-tp2-mtp.
UPSTREAM_PR_34353: dict[int, tuple[float, float, float]] = {
    1: (15.0, 55.2, 324.0),
    5: (27.3, 114.7, 1634.0),
    10: (41.7, 178.4, 1288.0),
}


class SteadyState(NamedTuple):
    """What a closed loop of clients measures once warm (means over requests)."""

    tpot_ms: float
    output_tok_per_s: float
    ttft_ms: float


def verify_tokens(cfg: SimConfig) -> int:
    """Tokens one running request adds to a step: 1, or the verify step's tokens with MTP."""
    if not cfg.spec_enabled:
        return 1
    if cfg.speculative_eagle_topk == 1:
        return cfg.speculative_num_steps + 1
    return cfg.speculative_num_draft_tokens


def step_ms(cfg: SimConfig, running: int) -> float:
    """One engine step (a decode step, or a verify step with its draft steps) at a batch size."""
    running = max(running, 1)
    if cfg.step_fixed_ms is None:
        return cfg.itl_ms + cfg.itl_ms_per_running_req * (running - 1)
    drafts = cfg.speculative_num_steps * cfg.draft_step_ms if cfg.spec_enabled else 0.0
    return cfg.step_fixed_ms + drafts + cfg.step_ms_per_token * verify_tokens(cfg) * running


def prefill_ms(cfg: SimConfig, prompt_tokens: int) -> float:
    return cfg.ttft_ms + cfg.prefill_ms_per_1k_tokens * prompt_tokens / 1000.0


def solve_constant_rate(n: int, target: float) -> float:
    """The per-position acceptance p (no decay) whose chain has mean ``target`` tokens."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if sum(mid**i for i in range(n + 1)) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def position_rates(cfg: SimConfig) -> list[float]:
    """Chance that draft position 1..num-steps is accepted, given the ones before it were."""
    n = cfg.speculative_num_steps
    if cfg.accept_length is not None:
        return [solve_constant_rate(n, cfg.accept_length)] * n
    if cfg.accept_rate is not None:
        return [min(1.0, cfg.accept_rate * cfg.accept_decay**i) for i in range(n)]
    return [0.0] * n


def acceptance_distribution(cfg: SimConfig) -> list[float]:
    """Probabilities of 1..num_steps+1 tokens per verify step."""
    if cfg.accept_distribution is not None:
        return list(cfg.accept_distribution)
    dist: list[float] = []
    survive = 1.0
    for p in position_rates(cfg):
        dist.append(survive * (1.0 - p))
        survive *= p
    dist.append(survive)
    return dist


def accept_length(cfg: SimConfig) -> float:
    """Mean tokens per verify step (1 without speculation)."""
    if not cfg.spec_enabled:
        return 1.0
    return sum((k + 1) * p for k, p in enumerate(acceptance_distribution(cfg)))


def expected_steps(cfg: SimConfig, tokens: int) -> float:
    """Mean engine steps that emit ``tokens`` tokens after the first (the last one cut short)."""
    if tokens <= 0:
        return 0.0
    if not cfg.spec_enabled:
        return float(tokens)
    dist = acceptance_distribution(cfg)
    steps = [0.0] * (tokens + 1)
    for r in range(1, tokens + 1):
        steps[r] = 1.0 + sum(p * steps[max(r - k - 1, 0)] for k, p in enumerate(dist))
    return steps[tokens]


def steady_state(
    cfg: SimConfig,
    concurrency: int,
    *,
    input_len: int = DEFAULT_INPUT_LEN,
    output_len: int = DEFAULT_OUTPUT_LEN,
) -> SteadyState:
    """(TPOT ms, output tokens/s, TTFT ms) of ``concurrency`` clients in a closed loop, as
    ``sglang.benchmark.serving --max-concurrency`` runs them: ``m`` of them run (the rest queue);
    with ``prefill-serial`` the loop settles into waves of ``prefill-batch-tokens // input_len``
    prefilled together, and a prefill lane longer than a request's cycle adds its queue to TTFT.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency {concurrency} must be >= 1")
    m = min(concurrency, cfg.max_running_requests)
    decode = expected_steps(cfg, output_len - 1) * step_ms(cfg, m)
    if not cfg.prefill_serial:
        ttft = prefill_ms(cfg, input_len)
        lane = 0.0
    else:
        per = (
            max(1, cfg.prefill_batch_tokens // max(input_len, 1)) if cfg.prefill_batch_tokens else 1
        )
        waves = [per] * (m // per) + ([m % per] if m % per else [])
        costs = [prefill_ms(cfg, k * input_len) for k in waves]
        ttft = sum(k * b for k, b in zip(waves, costs, strict=True)) / m
        lane = sum(costs)
    cycle = max(ttft + decode, lane)
    client_cycle = cycle * concurrency / m  # beyond max-running-requests, the queue
    return SteadyState(
        tpot_ms=decode / (output_len - 1) if output_len > 1 else 0.0,
        output_tok_per_s=m * output_len / cycle * 1000.0,
        ttft_ms=client_cycle - decode,
    )


def fit_step(cfg: SimConfig, tpot_ms: dict[int, float]) -> tuple[float, float]:
    """(step-fixed-ms, step-ms-per-token) whose TPOTs best fit ``tpot_ms`` (concurrency -> TPOT):
    the least-squares line, TPOT being linear in the running requests; the rest from ``cfg``."""
    if len(tpot_ms) < 2:
        raise ValueError("fit_step needs TPOTs at two or more concurrencies")
    out = DEFAULT_OUTPUT_LEN - 1
    per_step = expected_steps(cfg, out) / out
    xs = [float(min(c, cfg.max_running_requests)) for c in tpot_ms]
    ys = [t / per_step for t in tpot_ms.values()]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )
    drafts = cfg.speculative_num_steps * cfg.draft_step_ms if cfg.spec_enabled else 0.0
    return my - slope * mx - drafts, slope / verify_tokens(cfg)


def crossover(
    cfg_on: SimConfig,
    cfg_off: SimConfig,
    concurrencies: Iterable[int],
    *,
    input_len: int = DEFAULT_INPUT_LEN,
    output_len: int = DEFAULT_OUTPUT_LEN,
) -> int | None:
    """The lowest of ``concurrencies`` at which ``cfg_on`` delivers fewer output tokens/s than
    ``cfg_off`` (MTP on vs off); None if it never does."""
    for c in sorted(set(concurrencies)):
        on = steady_state(cfg_on, c, input_len=input_len, output_len=output_len)
        off = steady_state(cfg_off, c, input_len=input_len, output_len=output_len)
        if on.output_tok_per_s < off.output_tok_per_s:
            return c
    return None
