"""``qwen-npu fetch``: from a model name to a verified checkpoint directory.

Getting 35-400 GB from ModelScope, Hugging Face or an OBS/S3 bucket onto a claim is a new site's
first step, and the usual downloaders run out of memory, hang without retrying, miss their token,
fill the disk, or let a half-written directory look complete. docs/runbook.md "Fetching a model".
"""
