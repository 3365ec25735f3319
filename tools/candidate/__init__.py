"""``make sglang-candidate``: what a new SGLang release changes, per patch and contract link.

Why: every patch pins its target's exact code, so on a new release the drift guard applies
nothing; this makes moving on one command (``run``): the candidate in a scratch venv, the probe
(``probe``), the diff against the carried pinned sources (``sources``), the patch tests with the
candidate's pins (``pins_plugin``), one verdict per patch (``report``), and ``--repin`` (``repin``).
"""

#: The JSON file of the candidate's pins for the test run; here so ``run`` imports no pytest.
ENV_PINS = "QWEN_NPU_CANDIDATE_PINS"
