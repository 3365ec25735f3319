"""qwen_npu.hardware.driver: version.info as the Ascend driver writes it, MAJOR.MINOR comparison."""

from __future__ import annotations

from pathlib import Path

import pytest

from qwen_npu.hardware import driver


def _info(tmp_path: Path, text: str) -> dict[str, str]:
    path = tmp_path / "version.info"
    path.write_text(text)
    return {driver.ENV_MIN: "25.2", driver.ENV_FILE: str(path)}


@pytest.mark.parametrize(
    ("text", "state", "installed"),
    [
        (
            "Version=25.2.0\nascendhal_version=7.35.23\npackage_version=25.2.0\n",
            driver.OK,
            "25.2.0",
        ),
        ("Version=25.3.rc1\r\nascendhal_version=7.35.23\r\n", driver.OK, "25.3.rc1"),
        ("Version=25.0.rc1.1\npackage_version=25.0.rc1.1\n", driver.UNSUPPORTED, "25.0.rc1.1"),
        ("Version=24.1.rc2.2\n", driver.UNSUPPORTED, "24.1.rc2.2"),
        # package_version wins over a component version under Version=
        ("Version=7.35.23\npackage_version=26.0.rc1\n", driver.OK, "26.0.rc1"),
        ("ascendhal_version=7.35.23\n", driver.UNKNOWN, ""),
        ("Version=unknown\n", driver.UNKNOWN, "unknown"),
    ],
)
def test_the_version_info_is_read_and_compared(
    tmp_path: Path, text: str, state: str, installed: str
) -> None:
    result = driver.check(_info(tmp_path, text))
    assert (result.state, result.installed) == (state, installed)
    if state == driver.UNSUPPORTED:
        assert installed in result.message and "HDK 25.2 or later" in result.message


def test_missing_file_unknown_and_no_minimum_not_checked(tmp_path: Path) -> None:
    gone = {driver.ENV_MIN: "25.2", driver.ENV_FILE: str(tmp_path / "none")}
    assert driver.check(gone).state == driver.UNKNOWN
    assert driver.check({driver.ENV_FILE: str(tmp_path / "none")}).state == driver.NOT_CHECKED
    assert driver.check({}).file == driver.DEFAULT_FILE
    with pytest.raises(ValueError, match=r"MAJOR\.MINOR"):
        driver.check({driver.ENV_MIN: "25.2.0"})
