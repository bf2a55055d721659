from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture
def repo() -> Path:
    return REPO


@pytest.fixture
def data_dir() -> Path:
    return DATA
