"""``qwen-npu fetch``: from a model name to a verified checkpoint directory.

Why this exists: the chart serves a checkpoint that is already on a claim, a hostPath or in an
image; getting 35-400 GB there from ModelScope, Hugging Face or an OBS/S3 bucket is the first thing
a new site does, and the downloaders people reach for run out of memory, hang without retrying,
never see their token, fill the disk, or let a half-written directory look complete.

The parts: ``source`` (the SOURCE syntax), ``hubs`` and ``objects`` (the real clients:
huggingface_hub, modelscope, boto3), ``transfer`` (one file: bounded memory, per-read timeout,
retries with backoff, resume, verification), ``lease`` (one writer per DEST), ``layout`` (the
revision directories, manifest and completion marker; standard library only, the engine image's
init container reads it), ``run`` (the whole fetch), ``wait`` (the init container's wait) and
``cli`` (the verb). docs/runbook.md "Fetching a model" is the user's side.
"""
