"""The simulator's price of speculation: the paper model, its calibration, and the running engine.

The calibrated MTP profile reproduces the upstream pull request's table on paper; the MTP-off and
1/2/3-step settings come from the same parameters (only the MTP keys differ); and the running
simulator, driven in a closed loop at small scale, measures what the paper model says.
"""

from __future__ import annotations

import pytest

from qwen_npu.sim import timing
from qwen_npu.sim.config import SimConfig, build
from qwen_npu.sim.timing import UPSTREAM_PR_34353, crossover, steady_state
from tools.perf.sim import MTP_PROFILE, NOMTP_PROFILE, closed_loop

MTP_KEYS = {
    "speculative-algorithm",
    "speculative-num-steps",
    "speculative-eagle-topk",
    "speculative-num-draft-tokens",
    "accept-rate",
    "accept-decay",
    "accept-length",
    "accept-distribution",
}


def _profile(name: str, **flags: object) -> SimConfig:
    cfg, _ = build({k.replace("_", "-"): v for k, v in flags.items()}, profile=name, env={})
    return cfg


def _steps(n: int) -> SimConfig:
    return _profile(MTP_PROFILE, speculative_num_steps=n, speculative_num_draft_tokens=n + 1)


@pytest.mark.parametrize("conc", sorted(UPSTREAM_PR_34353))
def test_the_mtp_profile_reproduces_the_upstream_table_on_paper(conc: int) -> None:
    tpot, tok_s, _ = UPSTREAM_PR_34353[conc]
    got = steady_state(_profile(MTP_PROFILE), conc)  # 1024 in / 100 out, as upstream
    assert got.tpot_ms == pytest.approx(tpot, rel=0.10)
    assert got.output_tok_per_s == pytest.approx(tok_s, rel=0.10)


def test_the_profile_is_the_fit_of_the_upstream_tpots() -> None:
    cfg = _profile(MTP_PROFILE)
    fixed, per_token = timing.fit_step(cfg, {c: t for c, (t, _, _) in UPSTREAM_PR_34353.items()})
    assert cfg.step_fixed_ms == pytest.approx(fixed, abs=0.05)  # the profile rounds to 0.1 ms
    assert cfg.step_ms_per_token == pytest.approx(per_token, abs=0.005)
    with pytest.raises(ValueError, match="two or more"):
        timing.fit_step(cfg, {1: 15.0})


def test_mtp_off_is_the_same_hardware() -> None:
    on, off = _profile(MTP_PROFILE).model_dump(), _profile(NOMTP_PROFILE).model_dump()
    differ = {k.replace("_", "-") for k in on if on[k] != off[k]}
    assert differ <= MTP_KEYS, differ
    assert not _profile(NOMTP_PROFILE).spec_enabled


def test_settings_follow_from_the_same_parameters() -> None:
    base = _profile(MTP_PROFILE)
    off = _profile(NOMTP_PROFILE)
    assert base.step_fixed_ms is not None
    # The same step price everywhere: a verify step is a decode step with more tokens + drafts.
    for n in (1, 2, 3):
        cfg = _steps(n)
        want = base.step_fixed_ms + n * base.draft_step_ms + base.step_ms_per_token * (n + 1) * 4
        assert timing.step_ms(cfg, 4) == pytest.approx(want)
    assert timing.step_ms(off, 4) == pytest.approx(base.step_fixed_ms + base.step_ms_per_token * 4)
    # Acceptance decays per position: each extra step adds less.
    lengths = [timing.accept_length(_steps(n)) for n in (1, 2, 3)]
    assert lengths == sorted(lengths)
    assert lengths[1] - lengths[0] > lengths[2] - lengths[1] > 0
    # MTP wins at concurrency 1 and loses at 32, and more steps lose earlier.
    assert steady_state(base, 1).output_tok_per_s > 1.3 * steady_state(off, 1).output_tok_per_s
    assert steady_state(base, 32).output_tok_per_s < steady_state(off, 32).output_tok_per_s
    # More steps lose earlier (1 step, cheap to verify, may never lose before the prefill lane
    # caps both at the same throughput).
    concs = range(1, 65)
    one, two, three = (crossover(_steps(n), off, concs) for n in (1, 2, 3))
    assert two is not None and three is not None
    assert (one is None or one > two) and two > three > 5, (one, two, three)


def test_the_crossover_depends_on_acceptance() -> None:
    off = _profile(NOMTP_PROFILE)
    good = crossover(_profile(MTP_PROFILE, accept_rate=0.9), off, range(1, 129))
    base = crossover(_profile(MTP_PROFILE), off, range(1, 129))
    poor = crossover(_profile(MTP_PROFILE, accept_rate=0.5), off, range(1, 129))
    assert good is not None and base is not None and poor is not None
    assert poor < base < good
    # With nothing accepted MTP never pays.
    assert crossover(_profile(MTP_PROFILE, accept_rate=0.0), off, [1, 2]) == 1


def test_the_legacy_keys_price_as_before() -> None:
    cfg = SimConfig(itl_ms=37.5, itl_ms_per_running_req=7.4, accept_length=2.5)
    cfg = cfg.model_copy(update={"speculative_algorithm": "NEXTN"})
    assert [timing.step_ms(cfg, n) for n in (1, 2, 10)] == pytest.approx([37.5, 44.9, 104.1])
    assert timing.accept_length(cfg) == pytest.approx(2.5)
    plain = SimConfig(ttft_ms=20, itl_ms=5)
    assert steady_state(plain, 1, input_len=10, output_len=11) == pytest.approx(
        (5.0, 11 / 0.07, 20)
    )


def test_expected_steps_and_acceptance_distribution() -> None:
    cfg = _profile(MTP_PROFILE)
    dist = timing.acceptance_distribution(cfg)
    rates = timing.position_rates(cfg)
    assert rates == pytest.approx([0.75, 0.75 * 0.85, 0.75 * 0.85**2])
    assert sum(dist) == pytest.approx(1.0)
    assert dist[-1] == pytest.approx(rates[0] * rates[1] * rates[2])
    # Many tokens: steps ~ tokens / accept length; few: the last step is cut short.
    assert timing.expected_steps(cfg, 990) == pytest.approx(990 / timing.accept_length(cfg), 0.01)
    assert timing.expected_steps(cfg, 1) == 1.0
    assert timing.expected_steps(_profile(NOMTP_PROFILE), 99) == 99.0


def test_bad_concurrency_is_refused() -> None:
    with pytest.raises(ValueError, match="concurrency"):
        steady_state(SimConfig(), 0)


SCALE = 0.5  # every simulated duration x 0.5: the same shape, twice as fast


@pytest.mark.parametrize(
    "profile,conc,num",
    [(MTP_PROFILE, 1, 3), (MTP_PROFILE, 4, 12), (NOMTP_PROFILE, 4, 12)],
)
@pytest.mark.slow
def test_the_running_simulator_measures_the_paper_figures(
    profile: str, conc: int, num: int
) -> None:
    paper = steady_state(_profile(profile), conc)
    got = closed_loop(profile, conc, num, scale=SCALE)
    assert got.requests == num
    # Behaviour, not speed: loose tolerances (acceptance is drawn; a shared machine adds jitter).
    assert got.tpot_ms == pytest.approx(paper.tpot_ms, rel=0.2), (got, paper)
    assert got.ttft_ms == pytest.approx(paper.ttft_ms, rel=0.25), (got, paper)
    assert got.output_tok_per_s == pytest.approx(paper.output_tok_per_s, rel=0.25), (got, paper)
