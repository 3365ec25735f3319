"""``qwen-npu qualify``: the target's first hour as claims with verdicts and evidence, one report.

What only a real node can prove (the start-up state, greedy answers with MTP on against MTP off or
the copy route, accuracy on a staged set, the upstream table, the decode kernel) used to be a
checklist walked by hand. Here each is a claim (claims/) built on what the project already has:
the sidecar's ``/status`` and the engine's state file, the canary's scoring, the bench and its
A/B decision, the kernel proof under Triton's interpreter. report.py writes ``report.md`` and
``report.json``; cli.py is the verb.
"""
