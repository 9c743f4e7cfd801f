"""Which megatron-core releases run, warn or are refused, and the async strategy a save takes on each."""

import pytest

from ckpt_bench.core import megatron_release
from ckpt_bench.core.errors import ConfigError
from ckpt_bench.core.megatron_release import Release, async_strategy, check, save_arguments


@pytest.mark.parametrize("version", ["0.16.1", "0.16.0", "0.19.0", "0.19.1", "0.19.2"])
def test_tested_series_run_without_a_word(version):
    assert check(Release(version), python=(3, 12)) is None


@pytest.mark.parametrize("version", ["0.12.3", "0.17.0", "0.18.1", "0.20.0rc1"])
def test_other_releases_run_with_one_warning_naming_them(version):
    warning = check(Release(version), python=(3, 12))
    assert warning.startswith(f"megatron-core {version} is not a release ckpt-bench was tested on (0.16.x, 0.19.x)")
    assert "\n" not in warning


def test_a_release_older_than_the_floor_is_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"megatron-core 0\.11\.0: ckpt-bench needs 0\.12 or newer"):
        check(Release("0.11.0"), python=(3, 11))


def test_today_s_megatron_core_on_python_3_11_is_refused_as_it_breaks():
    with pytest.raises(ConfigError, match=r"megatron-core 0\.19\.2 on Python 3\.11: 0\.17 and newer need Python 3\.12"):
        check(Release("0.19.2"), python=(3, 11))


def test_no_megatron_core_is_left_to_the_backends_that_need_it():
    assert check(Release(None), python=(3, 11)) is None


def test_0_16_has_no_async_strategy_and_refuses_one_asked_for():
    assert async_strategy(None, True, Release("0.16.1")) == (None, None)
    assert save_arguments(None) == {}
    with pytest.raises(ConfigError, match="async_strategy nvrx: megatron-core 0.16.1 has no such setting"):
        async_strategy("nvrx", True, Release("0.16.1"))


def test_0_19_takes_mcore_for_synchronous_saves_as_megatron_lm_does():
    assert async_strategy(None, False, Release("0.19.2")) == ("mcore", None)
    assert save_arguments("mcore") == {"async_strategy": "mcore"}


def test_0_19_async_takes_nvrx_where_it_runs(monkeypatch):
    monkeypatch.setattr(megatron_release, "nvrx_missing", lambda part="async_ckpt": None)
    assert async_strategy(None, True, Release("0.19.2")) == ("nvrx", None)
    assert async_strategy("mcore", True, Release("0.19.2")) == ("mcore", None)


def test_0_19_async_falls_back_to_mcore_with_a_note_where_nvrx_cannot_run(monkeypatch):
    why = "nvidia-resiliency-ext 0.0.0a0 on Python 3.13 has no async checkpointing"
    monkeypatch.setattr(megatron_release, "nvrx_missing", lambda part="async_ckpt": why)
    strategy, note = async_strategy(None, True, Release("0.19.2"))
    assert strategy == "mcore" and note.endswith(why) and "not Megatron-LM's default nvrx" in note
    with pytest.raises(ConfigError, match="async_strategy nvrx: nvidia-resiliency-ext 0.0.0a0 .* async_strategy=mcore"):
        async_strategy("nvrx", True, Release("0.19.2"))


def test_an_unknown_strategy_names_the_valid_ones():
    with pytest.raises(ConfigError, match="async_strategy 'fast': megatron-core 0.19.2 takes nvrx or mcore"):
        async_strategy("fast", True, Release("0.19.2"))

