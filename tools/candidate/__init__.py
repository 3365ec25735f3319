"""``make sglang-candidate``: what a new SGLang release changes, per patch and contract link.

Why this exists: every patch pins the exact source of its target (``PINS``), so the day SGLang
ships a new release the drift guard reports ``drifted`` and applies nothing. Moving on used to be
by hand (read the new source, decide, re-pin, re-test, move the version pins). This package makes
it one command, runnable on a laptop: install the candidate in a scratch venv beside the pinned CPU
torch, and report for each patch whether its target imports, what the behaviour probe says, the
unified diff of its target between the pinned release and the candidate, and whether the patch's
own tests pass against the candidate; and for each GDN state contract link, its verdict and the
diff of the SGLang code it reads. ``--repin`` then writes the new pins.

- ``sources``: the SGLang code each patch and link depends on, read from files by name; the pinned
  release's copy is carried as data (``pinned_sglang.json``, written by ``make
  sglang-snapshot``), so the diff needs no network;
- ``probe``: runs inside the candidate's Python, imports the targets, applies the patches, runs the
  behaviour probes and the contract checks, prints JSON;
- ``pins_plugin``: a pytest plugin that points the patches' ``PINS`` at the candidate's code, so
  the patch tests judge the patch's behaviour, not the fingerprint;
- ``report``: one verdict per patch (keep, re-pin, port, drop) and the report's text;
- ``run``: the venv, the child processes, progress, the command line;
- ``repin``: rewrites ``PINS``, ``SGLANG_VERSION`` and the pinned sources after a green report.
"""

#: The JSON file of the candidate's pins for the test run (``pins_plugin``); named here so the
#: parent (``run``) needs no pytest import.
ENV_PINS = "QWEN_NPU_CANDIDATE_PINS"
