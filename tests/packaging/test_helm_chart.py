"""The Helm chart (deploy/helm/sandstream), without a cluster: `helm template` of the default
values and of variants, every manifest validated against the Kubernetes schemas
(kubernetes-validate, strict: a field Kubernetes does not know fails), the properties that
matter asserted, and the commands the node and gateway pods run given to the real sandstreamd
(SANDSTREAM_BIN) with --print-config, so a flag or value the daemon refuses fails here.

helm comes from `scripts/install-deps test` (.venv/bin/helm, or HELM)."""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from conftest import REPO, VERSION
from helpers import BIN

pytestmark = pytest.mark.timeout(300)

CHART = REPO / "deploy" / "helm" / "sandstream"
HELM = os.environ.get("HELM", str(REPO / ".venv" / "bin" / "helm"))
NAMESPACE = "sandbox-farm"
RELEASE = "ss"
PREFIX = f"{RELEASE}-sandstream"
# The chart's kubeVersion floor, and the newest schemas kubernetes-validate carries.
KUBE_VERSIONS = ("1.27.0", "1.37.0")
KEY = "k8s-test-key"
POD_IP = "10.244.3.17"

ETCD_ONE = f"http://{PREFIX}-etcd-0.{PREFIX}-etcd.{NAMESPACE}.svc.cluster.local:2379"

# Values files of the variants; every one is rendered, validated and checked below.
VARIANTS: dict[str, dict[str, Any]] = {
    "default": {"apiKey": {"value": KEY}},
    "external-etcd": {
        "apiKey": {"value": KEY},
        "etcd": {"enabled": False,
                 "endpoints": ["http://etcd-a.infra:2379", "http://etcd-b.infra:2379"]},
    },
    "three-etcd-members": {"apiKey": {"value": KEY}, "etcd": {"replicas": 3}},
    "existing-secret": {"apiKey": {"existingSecret": "sandstream-keys",
                                   "existingSecretKey": "token"}},
    "load-balancer": {
        "apiKey": {"value": KEY},
        "gateway": {"replicas": 3,
                    "service": {"type": "LoadBalancer", "port": 8080,
                                "loadBalancerSourceRanges": ["203.0.113.0/24"],
                                "annotations": {"example.com/lb": "internal"}}},
    },
    "settings": {
        "apiKey": {"value": KEY},
        "image": {"repository": "registry.example.com/sandstream", "tag": "custom"},
        "settings": {"preview_domain": "sandboxes.example.com",
                     "public_url": "https://sandboxes.example.com"},
        "node": {"port": 9090, "dataDir": "/srv/sandstream", "keepSandboxesOnRestart": False,
                 "settings": {"max_sandboxes": 500, "max_image_bytes": 8589934592,
                              "write_timeout_seconds": 2.5, "allow_nested_userns": True,
                              "egress_pool": "none"},
                 "resources": {"limits": {"memory": "64Gi"}},
                 "tolerations": [{"operator": "Exists"}]},
        "gateway": {"settings": {"max_body_bytes": 2097152}},
        "etcd": {"persistence": {"enabled": False}},
    },
}


def helm(args: list[str], tmp: Path, values: dict[str, Any] | None = None
         ) -> subprocess.CompletedProcess[str]:
    if not os.access(HELM, os.X_OK):
        pytest.fail(f"no helm at {HELM}: scripts/install-deps test builds it (or set HELM)")
    argv = [HELM, *args]
    if values is not None:
        path = tmp / "values.yaml"
        path.write_text(yaml.safe_dump(values))
        argv += ["--values", str(path)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def template(tmp: Path, values: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return helm(["template", RELEASE, str(CHART), "--namespace", NAMESPACE], tmp, values)


@functools.cache
def rendered(variant: str) -> dict[tuple[str, str], dict[str, Any]]:
    """The manifests of a variant by (kind, name)."""
    with tempfile.TemporaryDirectory() as d:
        r = template(Path(d), VARIANTS[variant])
    assert r.returncode == 0, f"helm template ({variant}) exited {r.returncode}:\n{r.stderr}"
    docs = [d for d in yaml.safe_load_all(r.stdout) if d]
    by_name = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    assert len(by_name) == len(docs), "two manifests of one kind and name"
    return by_name


def pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["spec"]["template"]["spec"]


def only_container(doc: dict[str, Any]) -> dict[str, Any]:
    containers = pod_spec(doc)["containers"]
    assert len(containers) == 1
    return containers[0]


def flag(args: list[str], name: str) -> str:
    """The value of --name=value among args; fails if it is not there exactly once."""
    values = [a.split("=", 1)[1] for a in args if a.startswith(f"--{name}=")]
    assert len(values) == 1, f"--{name} in {args}"
    return values[0]


# ---- the chart itself ----

def test_chart_and_image_tag_are_the_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2"
    assert (chart["version"], chart["appVersion"]) == (VERSION, VERSION)
    node = rendered("default")[("DaemonSet", f"{PREFIX}-node")]
    assert only_container(node)["image"] == f"sandstream:{VERSION}"


def test_lint_strict(tmp_path: Path) -> None:
    r = helm(["lint", "--strict", str(CHART)], tmp_path, VARIANTS["default"])
    assert r.returncode == 0, r.stdout + r.stderr


# ---- every manifest against the Kubernetes schemas ----

@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_manifests_are_valid_kubernetes(variant: str) -> None:
    problems = []
    for (kind, name), doc in rendered(variant).items():
        for version in KUBE_VERSIONS:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                where = "/".join(str(p) for p in e.path)
                problems.append(f"{kind}/{name} (Kubernetes {version}) at {where}: {e.message}")
    assert not problems, "\n".join(problems)


def test_the_validation_refuses_an_unknown_field() -> None:
    """The strict schemas do catch a misspelt field (else the test above proves nothing)."""
    doc = json.loads(json.dumps(rendered("default")[("DaemonSet", f"{PREFIX}-node")]))
    pod_spec(doc)["hostPid"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, KUBE_VERSIONS[-1], strict=True)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_what_each_variant_renders(variant: str) -> None:
    values = VARIANTS[variant]
    etcd = values.get("etcd", {})
    expected = {("DaemonSet", f"{PREFIX}-node"), ("Deployment", f"{PREFIX}-gateway"),
                ("Service", PREFIX), ("PodDisruptionBudget", f"{PREFIX}-gateway")}
    if "value" in values["apiKey"]:
        expected.add(("Secret", f"{PREFIX}-api-key"))
    if etcd.get("enabled", True):
        expected |= {("StatefulSet", f"{PREFIX}-etcd"), ("Service", f"{PREFIX}-etcd")}
        if etcd.get("replicas", 1) > 1:
            expected.add(("PodDisruptionBudget", f"{PREFIX}-etcd"))
    assert set(rendered(variant)) == expected


# ---- nodes ----

def test_node_daemonset_is_privileged_on_the_hosts_cgroups_and_data_dir() -> None:
    node = rendered("default")[("DaemonSet", f"{PREFIX}-node")]
    spec = pod_spec(node)
    c = only_container(node)
    assert c["securityContext"]["privileged"] is True
    # Sandboxes outlive the pod: their cgroups outside the container's, keepers in the
    # machine's pid namespace.
    assert spec["hostPID"] is True and "hostNetwork" not in spec
    assert flag(c["args"], "cgroup-parent") == "/sandstream"
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    assert volumes[mounts["/sys/fs/cgroup"]]["hostPath"] == {"path": "/sys/fs/cgroup",
                                                            "type": "Directory"}
    assert volumes[mounts["/var/lib/sandstream"]]["hostPath"] == {
        "path": "/var/lib/sandstream", "type": "DirectoryOrCreate"}
    assert flag(c["args"], "data-dir") == "/var/lib/sandstream"
    assert flag(c["args"], "teardown-on-exit") == "false"
    assert flag(c["args"], "etcd") == ETCD_ONE
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "http"}, probe
    assert c["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    assert node["spec"]["template"]["metadata"]["annotations"] == {
        "prometheus.io/scrape": "true", "prometheus.io/port": "8080",
        "prometheus.io/path": "/metrics"}
    assert 10 <= spec["terminationGracePeriodSeconds"] <= 120
    env = {e["name"]: e for e in c["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert env["SANDSTREAM_API_KEY"]["valueFrom"] == {
        "secretKeyRef": {"name": f"{PREFIX}-api-key", "key": "api-key"}}
    secret = rendered("default")[("Secret", f"{PREFIX}-api-key")]
    assert secret["data"] == {"api-key": "azhzLXRlc3Qta2V5"}  # base64 of KEY


def test_sandboxes_may_end_with_their_pod() -> None:
    node = rendered("settings")[("DaemonSet", f"{PREFIX}-node")]
    assert "hostPID" not in pod_spec(node)
    assert not [a for a in only_container(node)["args"] if a.startswith("--cgroup-parent")]


def test_node_settings_data_dir_and_port() -> None:
    docs = rendered("settings")
    node = docs[("DaemonSet", f"{PREFIX}-node")]
    c = only_container(node)
    assert c["image"] == "registry.example.com/sandstream:custom"
    volumes = {v["name"]: v for v in pod_spec(node)["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    assert volumes[mounts["/var/lib/sandstream"]]["hostPath"]["path"] == "/srv/sandstream"
    assert flag(c["args"], "listen") == "0.0.0.0:9090"
    assert flag(c["args"], "max-image-bytes") == "8589934592"
    assert flag(c["args"], "write-timeout-seconds") == "2.5"
    assert flag(c["args"], "preview-domain") == "sandboxes.example.com"
    assert node["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] == "9090"
    # etcd without persistence: an emptyDir.
    etcd = docs[("StatefulSet", f"{PREFIX}-etcd")]
    assert "volumeClaimTemplates" not in etcd["spec"]
    assert pod_spec(etcd)["volumes"] == [{"name": "data", "emptyDir": {}}]


def test_existing_secret_is_used_and_none_is_made() -> None:
    docs = rendered("existing-secret")
    assert not [k for k in docs if k[0] == "Secret"]
    env = {e["name"]: e for e in only_container(docs[("DaemonSet", f"{PREFIX}-node")])["env"]}
    assert env["SANDSTREAM_API_KEY"]["valueFrom"] == {
        "secretKeyRef": {"name": "sandstream-keys", "key": "token"}}


# ---- gateways ----

def test_gateway_deployment_and_service() -> None:
    docs = rendered("default")
    gw = docs[("Deployment", f"{PREFIX}-gateway")]
    spec = pod_spec(gw)
    c = only_container(gw)
    assert gw["spec"]["replicas"] == 2
    assert c["command"] == ["sandstreamd"]
    assert flag(c["args"], "role") == "gateway"
    assert flag(c["args"], "etcd") == ETCD_ONE
    assert "volumes" not in spec and "hostPID" not in spec
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] != 0
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert "privileged" not in c["securityContext"]
    # The key only opens the gateway's own /metrics, which the pod's annotations point at.
    keys = [e for e in c["env"] if e["name"] == "SANDSTREAM_API_KEY"]
    assert keys[0]["valueFrom"]["secretKeyRef"]["name"] == f"{PREFIX}-api-key"
    assert gw["spec"]["template"]["metadata"]["annotations"]["prometheus.io/path"] == "/metrics"
    for probe in ("readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "http"}, probe
    svc = docs[("Service", PREFIX)]
    assert svc["spec"]["type"] == "ClusterIP"
    assert svc["spec"]["selector"] == gw["spec"]["selector"]["matchLabels"]
    assert svc["spec"]["ports"] == [{"name": "http", "port": 80, "targetPort": "http",
                                     "protocol": "TCP"}]
    assert docs[("PodDisruptionBudget", f"{PREFIX}-gateway")]["spec"]["minAvailable"] == 1


def test_gateway_load_balancer() -> None:
    docs = rendered("load-balancer")
    svc = docs[("Service", PREFIX)]
    assert svc["spec"]["type"] == "LoadBalancer"
    assert svc["spec"]["loadBalancerSourceRanges"] == ["203.0.113.0/24"]
    assert svc["spec"]["ports"][0]["port"] == 8080
    assert svc["metadata"]["annotations"] == {"example.com/lb": "internal"}
    assert docs[("Deployment", f"{PREFIX}-gateway")]["spec"]["replicas"] == 3


# ---- etcd ----

def test_three_etcd_members_know_each_other() -> None:
    docs = rendered("three-etcd-members")
    sts = docs[("StatefulSet", f"{PREFIX}-etcd")]
    svc = docs[("Service", f"{PREFIX}-etcd")]
    assert sts["spec"]["replicas"] == 3
    assert sts["spec"]["serviceName"] == svc["metadata"]["name"]
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"]
    c = only_container(sts)
    host = f"{PREFIX}-etcd-{{}}.{PREFIX}-etcd.{NAMESPACE}.svc.cluster.local"
    assert flag(c["args"], "initial-cluster") == ",".join(
        f"{PREFIX}-etcd-{i}=http://{host.format(i)}:2380" for i in range(3))
    assert flag(c["args"], "initial-cluster-state") == "new"
    assert flag(c["args"], "name") == "$(POD_NAME)"
    pod_host = host.format("$(POD_NAME)").replace(f"{PREFIX}-etcd-$(POD_NAME)", "$(POD_NAME)")
    assert flag(c["args"], "initial-advertise-peer-urls") == f"http://{pod_host}:2380"
    assert flag(c["args"], "advertise-client-urls") == f"http://{pod_host}:2379"
    env = {e["name"]: e for e in c["env"]}
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert c["image"].startswith("quay.io/coreos/etcd:v3.")
    endpoints = ",".join(f"http://{host.format(i)}:2379" for i in range(3))
    for kind, name in (("DaemonSet", f"{PREFIX}-node"), ("Deployment", f"{PREFIX}-gateway")):
        assert flag(only_container(docs[(kind, name)])["args"], "etcd") == endpoints
    assert docs[("PodDisruptionBudget", f"{PREFIX}-etcd")]["spec"]["minAvailable"] == 2


def test_external_etcd() -> None:
    docs = rendered("external-etcd")
    for kind, name in (("DaemonSet", f"{PREFIX}-node"), ("Deployment", f"{PREFIX}-gateway")):
        args = only_container(docs[(kind, name)])["args"]
        assert flag(args, "etcd") == "http://etcd-a.infra:2379,http://etcd-b.infra:2379"


# ---- what the chart refuses to render ----

@pytest.mark.parametrize("values, message", [
    ({}, "no API key: set apiKey.existingSecret"),
    ({"apiKey": {"value": KEY, "existingSecret": "s"}}, "not both"),
    ({"apiKey": {"value": KEY}, "etcd": {"enabled": False}}, "set etcd.endpoints"),
    ({"apiKey": {"value": KEY}, "etcd": {"endpoints": "http://e:2379"}}, "etcd.enabled=false"),
    ({"apiKey": {"value": KEY}, "etcd": {"replicas": 2}}, "etcd.replicas must be 1, 3 or 5"),
    ({"apiKey": {"value": KEY}, "node": {"settings": {"teardown_on_exit": True}}},
     "teardown_on_exit is set by the chart"),
    ({"apiKey": {"value": KEY}, "settings": {"node-id": "x"}}, "node_id is set by the chart"),
    ({"apiKey": {"value": KEY}, "node": {"settings": {"cgroup_parent": "/x"}}},
     "cgroup_parent is set by the chart"),
], ids=["no-key", "two-keys", "no-etcd", "etcd-twice", "etcd-even", "teardown", "node-id",
        "cgroup-parent"])
def test_refuses(values: dict[str, Any], message: str, tmp_path: Path) -> None:
    r = template(tmp_path, values)
    assert r.returncode != 0, r.stdout
    assert "sandstream: " in r.stderr and message in r.stderr, r.stderr


# ---- the pods' commands through the real daemon ----

def container_env(container: dict[str, Any], node_name: str) -> dict[str, str]:
    """The environment the container's command starts with, the downward API and the Secret
    resolved as the kubelet would."""
    fields = {"spec.nodeName": node_name, "status.podIP": POD_IP}
    env = {}
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
        elif "fieldRef" in e["valueFrom"]:
            env[e["name"]] = fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
        else:
            env[e["name"]] = KEY
    return env


def print_config(container: dict[str, Any], tmp: Path, node_name: str = "worker-1"
                 ) -> subprocess.CompletedProcess[str]:
    """The container's command and args with --print-config, `sandstreamd` on PATH being
    SANDSTREAM_BIN, in an environment of the container's variables only."""
    if not os.access(BIN, os.X_OK):
        pytest.fail(f"sandstreamd binary not found at {BIN} (set SANDSTREAM_BIN)")
    bindir = tmp / "bin"
    bindir.mkdir(exist_ok=True)
    if not (bindir / "sandstreamd").exists():
        (bindir / "sandstreamd").symlink_to(BIN)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SANDSTREAM_")}
    env.update(container_env(container, node_name))
    env["PATH"] = f"{bindir}:/usr/bin:/bin"
    # Kubernetes expands $(VAR) of the container's variables in command and args.
    def expand(s: str) -> str:
        return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m[1], m[0]), s)
    argv = [expand(a) for a in [*container["command"], *container["args"]]] + ["--print-config"]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)


def config_of(container: dict[str, Any], tmp: Path, node_name: str = "worker-1"
              ) -> dict[str, Any]:
    r = print_config(container, tmp, node_name)
    assert r.returncode == 0, f"sandstreamd refused the pod's command:\n{r.stderr}"
    return json.loads(r.stdout)


@pytest.mark.parametrize("variant", ["default", "three-etcd-members", "settings"])
def test_daemon_takes_the_node_command(variant: str, tmp_path: Path) -> None:
    docs = rendered(variant)
    c = only_container(docs[("DaemonSet", f"{PREFIX}-node")])
    config = config_of(c, tmp_path)
    assert config["role"] == "node"
    assert config["node_id"] == "worker-1"
    port = VARIANTS[variant].get("node", {}).get("port", 8080)
    assert config["advertise"] == f"{POD_IP}:{port}"
    assert config["listen"] == f"0.0.0.0:{port}"
    assert config["data_dir"] == "/var/lib/sandstream"
    assert config["etcd"] == flag(c["args"], "etcd")
    assert config["etcd_prefix"] == "/sandstream/"
    assert config["teardown_on_exit"] is False
    assert config["api_key"] == "(set)"
    if variant == "settings":
        assert (config["max_sandboxes"], config["max_image_bytes"]) == (500, 8589934592)
        assert config["write_timeout_seconds"] == 2.5
        assert config["allow_nested_userns"] is True
        assert config["egress_pool"] == "none"
        assert config["public_url"] == "https://sandboxes.example.com"


@pytest.mark.parametrize("variant", ["default", "external-etcd", "settings"])
def test_daemon_takes_the_gateway_command(variant: str, tmp_path: Path) -> None:
    c = only_container(rendered(variant)[("Deployment", f"{PREFIX}-gateway")])
    config = config_of(c, tmp_path)
    assert config["role"] == "gateway"
    assert config["etcd"] == flag(c["args"], "etcd")
    assert config["listen"] == "0.0.0.0:8080"
    if variant == "settings":
        assert config["max_body_bytes"] == 2097152
        assert config["preview_domain"] == "sandboxes.example.com"


@pytest.mark.parametrize("node_name, node_id", [
    ("worker-1", "worker-1"),
    ("ip-10-0-1-23.eu-west-1.compute.internal", "ip-10-0-1-23-eu-west-1-compute-internal"),
    ("pool-7f3a9c2e1d-worker-1.zone-b.internal", "pool-7f3a9c2e1d-worker-1-zone-b-internal"),
    # Longer than 40: 31 characters, '-' and 8 hex digits of a hash of the whole name.
    ("pool-7f3a9c2e1d-worker-12.zone-b.internal", "pool-7f3a9c2e1d-worker-12-zone-"),
    ("gke-prod-pool-a-1b2c3d4e-x9yz.europe-west4-a.c.my-project.internal",
     "gke-prod-pool-a-1b2c3d4e-x9yz-e"),
])
def test_node_id_from_the_machines_name(node_name: str, node_id: str, tmp_path: Path) -> None:
    c = only_container(rendered("default")[("DaemonSet", f"{PREFIX}-node")])
    got = config_of(c, tmp_path, node_name)["node_id"]
    if len(node_name) <= 40:
        assert got == node_id
    else:
        assert re.fullmatch(re.escape(node_id) + "-[0-9a-f]{8}", got), got


def test_long_machine_names_keep_distinct_node_ids(tmp_path: Path) -> None:
    c = only_container(rendered("default")[("DaemonSet", f"{PREFIX}-node")])
    name = "gke-prod-pool-a-1b2c3d4e-x9yz.europe-west4-a.c.my-project.internal"
    ids = {config_of(c, tmp_path, n)["node_id"]
           for n in (name, name.replace("europe-west4-a", "europe-west4-b"), name + "x")}
    assert len(ids) == 3, ids


def test_daemon_refuses_a_setting_it_does_not_know(tmp_path: Path) -> None:
    """A misspelt setting renders (the chart does not list the daemon's) but the daemon refuses
    it: the checks above would catch a flag the chart itself got wrong."""
    values = {**VARIANTS["default"], "node": {"settings": {"max_sandboxs": 10}}}
    r = template(tmp_path, values)
    assert r.returncode == 0, r.stderr
    node = next(d for d in yaml.safe_load_all(r.stdout) if d and d["kind"] == "DaemonSet")
    refused = print_config(only_container(node), tmp_path)
    assert refused.returncode != 0
    assert "unknown flag '--max-sandboxs=10'" in refused.stderr, refused.stderr
