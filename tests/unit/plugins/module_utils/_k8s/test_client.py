"""How the cluster modules find the cluster (plugins/module_utils/_k8s/client.py): the kubeconfig
and context options, then K8S_AUTH_KUBECONFIG / K8S_AUTH_CONTEXT (as kubernetes.core reads them),
then the kubernetes client's default (KUBECONFIG, else ~/.kube/config); a kubeconfig that is not
there is refused by name before any request."""

from __future__ import annotations

import json

import pytest
import yaml
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpusplit.k8s.plugins.module_utils._errors import GpusplitError
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s import client as k8s_client
from ansible_collections.gpusplit.k8s.plugins.module_utils._k8s.client import (
    API_ERRORS,
    CLUSTER_ARGS,
    KubeconfigError,
    api_client,
    cluster_params,
)


def kubeconfig(path, servers):
    """A kubeconfig with one context per server ({context: url}); the first is current."""
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": n, "cluster": {"server": url}} for n, url in servers.items()],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": n, "context": {"cluster": n, "user": "u"}} for n in servers],
        "current-context": next(iter(servers)),
    }
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture
def env(monkeypatch, tmp_path):
    """No kubeconfig variable set and a home without ~/.kube/config."""
    for name in ("K8S_AUTH_KUBECONFIG", "K8S_AUTH_CONTEXT", "KUBECONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    return monkeypatch


def module_params(args):
    with patch_module_args(args):
        return AnsibleModule(argument_spec=CLUSTER_ARGS).params


def test_the_options_fall_back_to_the_k8s_auth_variables(env, tmp_path):
    env.setenv("K8S_AUTH_KUBECONFIG", str(tmp_path / "from-env"))
    env.setenv("K8S_AUTH_CONTEXT", "ctx-env")
    assert module_params({}) == {"kubeconfig": str(tmp_path / "from-env"), "context": "ctx-env"}
    given = module_params({"kubeconfig": str(tmp_path / "given"), "context": "ctx"})
    assert given == {"kubeconfig": str(tmp_path / "given"), "context": "ctx"}


def test_the_variable_gets_a_path_expanded_like_the_option(env, tmp_path):
    env.setenv("K8S_AUTH_KUBECONFIG", "~/kc")
    assert module_params({})["kubeconfig"] == str(tmp_path / "home" / "kc")


def test_a_named_kubeconfig_is_used(env, tmp_path):
    path = kubeconfig(tmp_path / "kc", {"a": "https://a.example:6443"})
    assert cluster_params({"kubeconfig": str(path), "context": None}) == {
        "kubeconfig": str(path),
        "context": None,
    }


def test_the_variables_count_when_the_params_come_without_them(env, tmp_path):
    path = kubeconfig(tmp_path / "kc", {"a": "https://a.example:6443"})
    env.setenv("K8S_AUTH_KUBECONFIG", str(path))
    env.setenv("K8S_AUTH_CONTEXT", "a")
    assert cluster_params({}) == {"kubeconfig": str(path), "context": "a"}


def test_home_kube_config_is_the_last_fallback(env, tmp_path):
    (tmp_path / "home" / ".kube").mkdir()
    path = kubeconfig(tmp_path / "home" / ".kube" / "config", {"a": "https://a:1"})
    assert cluster_params({"kubeconfig": None, "context": None}) == {"kubeconfig": str(path), "context": None}


def test_kubeconfig_variable_is_left_to_the_client(env, tmp_path):
    env.setenv("KUBECONFIG", f"{tmp_path / 'one'}:{tmp_path / 'two'}")  # a list: the client merges it
    assert cluster_params({}) == {"kubeconfig": None, "context": None}


def test_a_missing_named_kubeconfig_is_refused_by_name(env, tmp_path):
    env.setenv("K8S_AUTH_KUBECONFIG", str(tmp_path / "nope"))
    with pytest.raises(KubeconfigError) as exc:
        cluster_params({})
    assert str(tmp_path / "nope") in str(exc.value) and "K8S_AUTH_KUBECONFIG" in str(exc.value)
    # a refusal (error root) that the modules' handlers of API errors also catch
    assert isinstance(exc.value, GpusplitError) and isinstance(exc.value, API_ERRORS)


def test_no_kubeconfig_at_all_is_refused_naming_every_place_looked_at(env, tmp_path):
    with pytest.raises(KubeconfigError) as exc:
        cluster_params({"kubeconfig": None, "context": None})
    text = str(exc.value)
    for where in (
        "kubeconfig option",
        "K8S_AUTH_KUBECONFIG",
        "KUBECONFIG",
        str(tmp_path / "home" / ".kube" / "config"),
    ):
        assert where in text


def test_api_client_connects_where_the_variables_say(env, tmp_path):
    path = kubeconfig(tmp_path / "kc", {"a": "https://a.example:6443", "b": "https://b.example:7443"})
    env.setenv("K8S_AUTH_KUBECONFIG", str(path))
    assert api_client({}).configuration.host == "https://a.example:6443"
    env.setenv("K8S_AUTH_CONTEXT", "b")
    assert api_client({}).configuration.host == "https://b.example:7443"
    # the option wins over the variable
    assert (
        api_client({"kubeconfig": str(path), "context": "a"}).configuration.host == "https://a.example:6443"
    )


def test_api_client_refuses_a_missing_kubeconfig_before_reading_anything(env, tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(k8s_client.config, "new_client_from_config", lambda **kw: calls.append(kw))
    with pytest.raises(KubeconfigError):
        api_client({"kubeconfig": str(tmp_path / "missing")})
    assert calls == []


def test_a_cluster_module_fails_with_the_message(env, tmp_path, capsys):
    from ansible_collections.gpusplit.k8s.plugins.modules import gpu_pending_diagnose

    env.setenv("K8S_AUTH_KUBECONFIG", str(tmp_path / "absent.conf"))
    with patch_module_args({}), pytest.raises(SystemExit) as exc:
        gpu_pending_diagnose.main()
    out = json.loads(capsys.readouterr().out)
    assert exc.value.code == 1 and str(tmp_path / "absent.conf") in out["msg"], out


class _Answer:
    def __init__(self, body: dict):
        self.data = json.dumps(body).encode()


def test_list_json_reads_the_answer_unparsed_and_returns_its_items():
    calls = []

    def list_things(*args, **kwargs):
        calls.append((args, kwargs))
        return _Answer({"kind": "PodList", "items": [{"metadata": {"name": "a"}, "status": {"x": None}}]})

    items = k8s_client.list_json(list_things, "ns", field_selector="reason=FailedScheduling")
    # the client is asked not to build its models; the dicts are the server's, nulls included
    assert calls == [(("ns",), {"_preload_content": False, "field_selector": "reason=FailedScheduling"})]
    assert items == [{"metadata": {"name": "a"}, "status": {"x": None}}]


@pytest.mark.parametrize("body", [{"kind": "NodeList", "items": None}, {"kind": "NodeList"}])
def test_list_json_gives_an_empty_list_for_an_answer_without_items(body):
    assert k8s_client.list_json(lambda **_: _Answer(body)) == []
