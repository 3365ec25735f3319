"""Fixtures of the load-test tests: a tiny local tokenizer folder and record builders."""

from __future__ import annotations

from pathlib import Path

import pytest

from fixtures.tokenizer import build_tokenizer


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tokenizer(tmp_path_factory.mktemp("tokenizer"))
