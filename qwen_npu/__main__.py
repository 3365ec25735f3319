"""``python -m qwen_npu`` is ``qwen-npu``."""

from qwen_npu.cli import main

raise SystemExit(main())
