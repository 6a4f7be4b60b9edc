"""Secrets are read on the controller and only ever reach the env file."""

from __future__ import annotations

import pytest

from sglang_deploy.deploy.secrets import read_secrets
from sglang_deploy.errors import PlanError
from sglang_deploy.plan.planner import plan_host
from sglang_deploy.plan.render import render
from sglang_deploy.plan.spec import build_spec

DATA = {
    "sglang_model": "Qwen/Qwen3-32B",
    "sglang_gpus": {"model": "L40S", "count": 2},
}


def test_env_and_file_sources(tmp_path):
    key_file = tmp_path / "api-key"
    key_file.write_text("sk-from-file\n")
    spec = build_spec("h", {}, {**DATA, "sglang_secrets": {"hf_token": {"env": "CTRL_HF"},
                                                           "api_key": {"file": str(key_file)}}})
    values = read_secrets("h", spec.secrets, {"CTRL_HF": "hf_abc"})
    assert values == {"HF_TOKEN": "hf_abc", "SGLANG_API_KEY": "sk-from-file"}
    files = render(plan_host(spec), values)
    assert "HF_TOKEN=hf_abc" in files.env and "SGLANG_API_KEY=sk-from-file" in files.env
    assert "hf_abc" not in files.unit and "sk-from-file" not in files.unit


def test_missing_secret_stops_the_host_without_echoing_anything(tmp_path):
    spec = build_spec("h", {}, {**DATA, "sglang_secrets": {"hf_token": {"env": "CTRL_HF"}}})
    with pytest.raises(PlanError, match=r"host h: sglang_secrets.hf_token: \$CTRL_HF is not set"):
        read_secrets("h", spec.secrets, {})
    spec = build_spec("h", {}, {**DATA, "sglang_secrets": {"api_key": {"file": str(tmp_path / "nope")}}})
    with pytest.raises(PlanError, match="sglang_secrets.api_key: cannot read"):
        read_secrets("h", spec.secrets, {})


# --- every secret-capable field seeded with its own canary -------------------------------------

CANARY = {name: f"CANARY{i}x{name.replace('_', '')}" for i, name in enumerate((
    "hf_env", "api_file", "hub_token", "openai_key", "wandb_key", "db_password", "aws_secret", "proxy_url",
    "index_url", "extra_index_url", "find_links"))}


def seeded_data(key_file) -> dict:
    """Host data with a distinct canary in every field that may hold a secret and plans."""
    key_file.write_text(CANARY["api_file"] + "\n")
    return {
        **DATA,
        "sglang_secrets": {"hf_token": {"env": "CANARY_HF"}, "api_key": {"file": str(key_file)}},
        "sglang_env": {
            "HUGGING_FACE_HUB_TOKEN": CANARY["hub_token"],
            "OPENAI_API_KEY": CANARY["openai_key"],
            "wandb_api_key": CANARY["wandb_key"],
            "DB_PASSWORD": CANARY["db_password"],
            "AWS_SECRET_ACCESS_KEY": CANARY["aws_secret"],
            "HTTPS_PROXY": f"http://proxyuser:{CANARY['proxy_url']}@proxy.example:3128",
            "OMP_NUM_THREADS": "8",
        },
        "sglang_pip_index_url": f"https://__token__:{CANARY['index_url']}@pypi.example/simple",
        "sglang_pip_extra_index_urls": ["https://mirror.example/simple", f"https://{CANARY['extra_index_url']}@x.example/s"],
        "sglang_pip_find_links": f"https://ci:{CANARY['find_links']}@wheels.example/",
    }


def leaked(text: str) -> list[str]:
    return [name for name, value in CANARY.items() if value in text]


def write_inventory(path, data) -> None:
    path.write_text(f"hosts = [('h', {data!r})]\n")


def test_plan_outputs_hold_no_secret(tmp_path, monkeypatch):
    from tests.test_cli import run

    monkeypatch.setenv("CANARY_HF", CANARY["hf_env"])
    inv = tmp_path / "inv.py"
    write_inventory(inv, seeded_data(tmp_path / "key"))
    for flags in ((), ("--json",), ("--explain",)):
        code, out, err = run("plan", str(inv), *flags)
        assert code == 0, err
        assert leaked(out + err) == [], flags
    code, out, _ = run("plan", str(inv))
    assert "OMP_NUM_THREADS=8" in out, "a plain variable stays visible"
    for name in ("HUGGING_FACE_HUB_TOKEN", "OPENAI_API_KEY", "wandb_api_key", "HTTPS_PROXY"):
        assert f"{name}='<redacted>'" in out


def test_deploy_files_and_commands_hold_no_secret_but_the_env_file(tmp_path):
    from pyinfra.api import FileUploadCommand

    from sglang_deploy.deploy.operations import PIP_CONFIG_DIR, install_sglang, stage_revision
    from sglang_deploy.lifecycle.revision import Layout

    spec = build_spec("h", {}, seeded_data(tmp_path / "key"))
    assert "OPENAI_API_KEY" not in spec.extra_env and spec.extra_env["OMP_NUM_THREADS"] == "8"
    plan = plan_host(spec)
    values = read_secrets("h", plan.secrets, {"CANARY_HF": CANARY["hf_env"]})
    files = render(plan, values)
    in_env = {"hf_env", "api_file", "hub_token", "openai_key", "wandb_key", "db_password", "aws_secret", "proxy_url"}
    assert set(leaked(files.env)) == in_env
    assert leaked(files.unit + files.nccl_conf + "\n".join(plan.argv) + "\n".join(plan.warnings)) == []
    assert "<redacted>" in render(plan).env and leaked(render(plan).env) == []

    pip = spec.install
    commands = list(install_sglang._inner(venv=plan.venv, version=plan.sglang_version, extras=pip.extras,
                                          index_url=pip.index_url, extra_index_urls=pip.extra_index_urls,
                                          find_links=pip.find_links, no_index=pip.no_index))
    uploads = [c for c in commands if isinstance(c, FileUploadCommand)]
    assert leaked("\n".join(str(c) for c in commands if not isinstance(c, FileUploadCommand))) == []
    assert [u.dest for u in uploads] == [f"{PIP_CONFIG_DIR}/pip.conf"]
    conf = uploads[0].src.getvalue().decode()
    assert set(leaked(conf)) == {"index_url", "extra_index_url", "find_links"}
    assert "https://mirror.example/simple" in conf, "an option with any credentialled URL goes whole"

    layout = Layout(service="sglang", unit_path=plan.service.unit_path, env_path=plan.service.env_path,
                    nccl_conf_path=plan.nccl_conf_path)
    staged = list(stage_revision._inner(layout=layout, rev="r1", files=files, argv=plan.argv,
                                        sglang_version=plan.sglang_version))
    for command in staged:
        if isinstance(command, FileUploadCommand):
            text = command.src.getvalue().decode()
            assert leaked(text) == [] or command.dest.endswith("/" + "sglang.env"), command.dest
        else:
            assert leaked(str(command)) == []


def test_plain_pip_urls_stay_pip_options():
    from sglang_deploy.deploy.operations import pip_url_options

    assert pip_url_options("https://pypi.example/simple", ["https://b.example/s"], "/wheels") == (
        ["--index-url", "https://pypi.example/simple", "--extra-index-url", "https://b.example/s",
         "--find-links", "/wheels"], "")


C = "CANARYrefusedx5e3"
REFUSED = [
    # secret flags in extra args, spelled out, with =, and abbreviated as argparse allows
    ("sglang_extra_args[0]", {"sglang_extra_args": ["--api-key", C]}),
    ("sglang_extra_args[0]", {"sglang_extra_args": [f"--api-key={C}"]}),
    ("sglang_extra_args[0]", {"sglang_extra_args": ["--api-k", C]}),
    ("sglang_extra_args[0]", {"sglang_extra_args": [f"--api-ke={C}"]}),
    ("sglang_extra_args[0]", {"sglang_extra_args": ["--api", C]}),
    ("sglang_extra_args[2]", {"sglang_extra_args": ["--max-prefill-tokens", "16384", f"--admin-api-key={C}"]}),
    ("sglang_extra_args[0]", {"sglang_extra_args": ["--ssl-keyfile-password", C]}),
    ("sglang_extra_args[1]", {"sglang_extra_args": ["--max-prefill-tokens", 918273645]}),
    # credentials in URLs where they would be shown
    ("sglang_gate.url", {"sglang_gate": {"url": f"http://gate:{C}@10.0.0.1:30000"}}),
    ("sglang_gate.url[0]", {"sglang_gate": {"url": [f"http://{C}@10.0.0.1:30000"]}}),
    ("sglang_model", {"sglang_model": f"https://user:{C}@models.example/qwen"}),
    ("sglang_intents.served_model_name", {"sglang_intents": {"served_model_name": f"ftp://u:{C}@x"}}),
    ("sglang_extra_args[1]", {"sglang_extra_args": ["--tokenizer-path", f"https://u:{C}@tok.example/t"]}),
    # type errors on secret fields must not echo what was given
    ("sglang_env.HF_HUB_TOKEN", {"sglang_env": {"HF_HUB_TOKEN": [C]}}),
    ("sglang_env.MY_PASSWORD", {"sglang_env": {"MY_PASSWORD": {"v": C}}}),
    ("sglang_env.SGLANG_API_KEY", {"sglang_env": {"SGLANG_API_KEY": C}}),
    ("sglang_secrets.api_key", {"sglang_secrets": {"api_key": C}}),
    ("sglang_secrets.api_key", {"sglang_secrets": {"api_key": {"value": C}}}),
    ("sglang_secrets.api_key.env", {"sglang_secrets": {"api_key": {"env": f"sk-{C}"}}}),
    ("sglang_secrets.hf_token.file", {"sglang_secrets": {"hf_token": {"file": [C]}}}),
    ("sglang_pip_index_url", {"sglang_pip_index_url": [f"https://u:{C}@p.example/simple"]}),
    ("sglang_pip_extra_index_urls", {"sglang_pip_extra_index_urls": f"https://u:{C}@p.example/simple"}),
    ("sglang_pip_extra_index_urls[0]", {"sglang_pip_extra_index_urls": [{"url": f"https://u:{C}@p.example/s"}]}),
    ("sglang_pip_find_links", {"sglang_pip_find_links": [C]}),
]


@pytest.mark.parametrize("field, data", REFUSED, ids=[f"{i}-{f}" for i, (f, _) in enumerate(REFUSED)])
def test_refusals_name_the_field_never_the_secret(tmp_path, field, data):
    from tests.test_cli import run

    with pytest.raises(PlanError) as exc:
        plan_host(build_spec("h", {}, {**DATA, **data}))
    assert exc.value.field == field and C not in str(exc.value) and "918273645" not in str(exc.value)
    inv = tmp_path / "inv.py"
    write_inventory(inv, {**DATA, **data})
    code, out, err = run("plan", str(inv), "--json")
    assert code != 0 and C not in out + err and "918273645" not in out + err


def test_refused_secret_flags_say_how_to_do_it_right():
    with pytest.raises(PlanError,
                       match=r"--api-key \(--api-k abbreviates it\) takes a secret.*sglang_secrets\.api_key"):
        build_spec("h", {}, {**DATA, "sglang_extra_args": ["--api-k", C]})
    build_spec("h", {}, {**DATA, "sglang_extra_args": ["--ssl-keyfile", "/etc/ssl/key.pem"]})  # a path, no secret


@pytest.mark.parametrize("content", [b"\xff\xfe" + C.encode(), f"{C}\nsecond line\n".encode()])
def test_unreadable_key_files_fail_without_echo(tmp_path, content):
    key = tmp_path / "key"
    key.write_bytes(content)
    spec = build_spec("h", {}, {**DATA, "sglang_secrets": {"api_key": {"file": str(key)}}})
    with pytest.raises(PlanError) as exc:
        read_secrets("h", spec.secrets, {})
    assert exc.value.field == "sglang_secrets.api_key" and C not in str(exc.value)


def test_uv_installs_with_the_same_options_and_keeps_credentials_out_of_argv(tmp_path):
    import tomllib

    from pyinfra.api import FileUploadCommand

    from sglang_deploy.deploy.operations import PIP_CONFIG_DIR, install_sglang

    spec = build_spec("h", {}, {**seeded_data(tmp_path / "key"), "sglang_installer": "uv"})
    plan, pip = plan_host(spec), spec.install
    assert pip.installer == "uv"
    commands = list(install_sglang._inner(venv=plan.venv, version=plan.sglang_version, extras=pip.extras,
                                          index_url=pip.index_url, extra_index_urls=pip.extra_index_urls,
                                          find_links=pip.find_links, no_index=pip.no_index, installer="uv"))
    text = [str(c) for c in commands if not isinstance(c, FileUploadCommand)]
    assert leaked("\n".join(text)) == []
    uv = f"{plan.service.venvs_dir}/.uv/bin/uv"
    assert any(t.startswith(f"UV_CONFIG_FILE={PIP_CONFIG_DIR}/uv.toml {uv} pip install -q --python "
                            f"{plan.venv}/bin/python") for t in text)
    assert any(f"test -x {plan.service.venvs_dir}/.uv/bin/uv ||" in t and " uv;" in t for t in text)
    uploads = {u.dest: u.src.getvalue().decode() for u in commands if isinstance(u, FileUploadCommand)}
    toml = tomllib.loads(uploads[f"{PIP_CONFIG_DIR}/uv.toml"])["pip"]
    assert set(leaked(uploads[f"{PIP_CONFIG_DIR}/uv.toml"])) == {"index_url", "extra_index_url", "find_links"}
    assert isinstance(toml["index-url"], str) and isinstance(toml["extra-index-url"], list)
