"""Settings: defaults, SR_* environment variables, validation, flag overrides."""

from __future__ import annotations

from pathlib import Path

import pytest

from sr import DEFAULT_CHOICE
from sr.service.settings import FORM_OVERHEAD_BYTES, Settings, SettingsError


def test_defaults_without_environment() -> None:
    s = Settings.from_env({})
    assert s == Settings()
    assert (s.model, s.device, s.workers, s.api_key, s.cors_origins) == (DEFAULT_CHOICE, "auto", 1, None, ())
    assert DEFAULT_CHOICE == "auto"  # the measured rule made auto the default (docs/photo.md)
    assert s.body_limit == s.max_upload_bytes + FORM_OVERHEAD_BYTES


def test_environment_variables_are_parsed() -> None:
    s = Settings.from_env({
        "SR_MODEL": "asa-small", "SR_DEVICE": "cpu", "SR_WORKERS": "3", "SR_MAX_QUEUE": "0",
        "SR_MAX_UPLOAD_BYTES": "1000", "SR_MAX_PIXELS": "4096", "SR_TIMEOUT_S": "2.5", "SR_API_KEY": "k",
        "SR_CORS_ORIGINS": "http://a.test, http://b.test,", "SR_WEIGHTS_DIR": "/tmp/w", "SR_TILE": "off",
        "SR_PRELOAD": "false", "SR_THREADS": "", "SR_PRECISION": " BF16 ",  # empty means unset
    })
    assert s.precision == "bf16" and Settings().precision == "auto"
    assert (s.model, s.device, s.workers, s.max_queue) == ("asa-small", "cpu", 3, 0)
    assert (s.max_upload_bytes, s.max_pixels, s.timeout_s, s.api_key) == (1000, 4096, 2.5, "k")
    assert s.cors_origins == ("http://a.test", "http://b.test")
    assert s.weights_dir == Path("/tmp/w")
    assert (s.tile, s.preload, s.threads) == (0, False, None)


@pytest.mark.parametrize("env, needle", [
    ({"SR_WORKERS": "two"}, "SR_WORKERS"),
    ({"SR_WORKERS": "0"}, "workers must be >= 1"),
    ({"SR_MAX_QUEUE": "-1"}, "max queue"),
    ({"SR_TIMEOUT_S": "0"}, "timeout"),
    ({"SR_PRELOAD": "maybe"}, "SR_PRELOAD"),
    ({"SR_TILE": "-5"}, "SR_TILE"),
    ({"SR_PRECISION": "fp16"}, "SR_PRECISION='fp16': precision must be one of auto, fp32, bf16"),
])
def test_bad_values_give_one_clear_error(env: dict[str, str], needle: str) -> None:
    with pytest.raises(SettingsError, match=needle):
        Settings.from_env(env)


def test_replace_ignores_unset_flags() -> None:
    s = Settings(workers=2).replace(workers=None, max_queue=7)
    assert (s.workers, s.max_queue) == (2, 7)
    assert Settings().replace(api_key=None).api_key is None


@pytest.mark.parametrize("cpus, workers, threads, expected", [
    (8, 1, None, 8),   # one worker: every usable CPU
    (8, 2, None, 4),   # shared out: workers x threads = CPUs, no core runs two teams' threads
    (8, 3, None, 2),
    (2, 4, None, 1),   # more workers than CPUs: one thread each, never zero
    (8, 2, 3, 3),      # set explicitly: taken as it is
])
def test_engine_threads_share_the_usable_cpus_among_workers(monkeypatch: pytest.MonkeyPatch, cpus: int,
                                                             workers: int, threads: int | None,
                                                             expected: int) -> None:
    monkeypatch.setattr("sr.inference.devices.os.sched_getaffinity", lambda pid: set(range(cpus)),
                        raising=False)
    assert Settings(workers=workers, threads=threads).engine_threads == expected


def test_the_hub_builds_engines_with_the_shared_out_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    from sr.service.hub import ModelHub

    built: list[dict] = []

    class FakeUpscaler:
        def __init__(self, **kwargs: object) -> None:
            built.append(kwargs)

    monkeypatch.setattr("sr.inference.Upscaler", FakeUpscaler)
    monkeypatch.setattr("sr.inference.devices.os.sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    ModelHub(Settings(workers=2)).engine("asa-base")
    assert built[0]["threads"] == 2


def test_every_setting_is_read_from_its_own_variable_by_its_type() -> None:
    """One declaration per setting: SR_ + its name in capitals is read, by the field's type."""
    import dataclasses

    from sr.service.settings import env_name, parse_bool

    given = {"str": ("x", str), "int": ("70000", int), "float": ("7.5", float), "bool": ("off", parse_bool),
             "Path": ("/tmp/x", Path)}
    for f in dataclasses.fields(Settings):
        if f.name in ("precision", "api_key", "cors_origins", "tile"):
            continue  # their own grammars: tested above
        text, read = given[str(f.type).replace(" | None", "")]
        s = Settings.from_env({env_name(f.name): text})
        assert getattr(s, f.name) == read(text) != f.default, f.name


def test_the_docs_settings_table_is_the_settings_table() -> None:
    from sr.service.settings import settings_table

    docs = (Path(__file__).resolve().parents[2] / "docs" / "service.md").read_text(encoding="utf-8")
    assert settings_table() in docs
    assert settings_table().count("\n| `SR_") == len(Settings.__dataclass_fields__)


def test_the_flags_the_table_names_are_sr_serves() -> None:
    import argparse
    import dataclasses

    from sr.commands import serve

    parser = argparse.ArgumentParser()
    serve.add_arguments(parser)
    usage = parser.format_usage()
    named = [f.metadata["spec"].flag for f in dataclasses.fields(Settings) if f.metadata["spec"].flag]
    assert len(named) == 15 and all(f"[{flag} " in usage for flag in named), usage


def test_the_documented_deployment_command_builds_the_app_from_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/service.md's `uvicorn --factory MODULE:FACTORY`: the factory, called as uvicorn calls it
    (no arguments), reads the SR_* variables (here an API key: /v1 refuses a keyless request)."""
    import re

    from fastapi.testclient import TestClient
    from uvicorn.importer import import_from_string

    docs = (Path(__file__).resolve().parents[2] / "docs" / "service.md").read_text(encoding="utf-8")
    target = re.search(r"^\s+SR_\S+ .*uvicorn --factory (\S+)", docs, re.M)
    assert target, "no `uvicorn --factory` line in docs/service.md"
    factory = import_from_string(target.group(1))
    monkeypatch.setenv("SR_API_KEY", "deploy-key")
    client = TestClient(factory())  # not entered: no lifespan, no model loaded; the guards answer
    assert Settings().api_key is None and client.get("/v1/models").status_code == 401
