#!/usr/bin/env bash
# The Helm chart deploy/helm/phalanx, checked end to end:
#
#   1. offline: the chart's CRDs are deploy/crds/; helm lint and helm template with the
#      default values and several others; bad values refused; the rendered-YAML checks
#      (scheduler/tests/helm_chart.rs);
#   2. on a testbed of its own (other ports and dir than the default one): server-side dry
#      run of the rendered manifests, helm install, Pod Security "restricted" enforced on a
#      pod made from the installed StatefulSet, the service account's rights (kubectl auth
#      can-i), the replica-count guard on upgrade, then the installed StatefulSet's pods run
#      as processes with the service account's token (`phalanx status` through every
#      replica's admin port lists every replica and shard, a gang placed, the leader SIGKILLed,
#      another gang placed, the killed pod back on its data dir, a rolling restart, a third
#      gang placed), and helm uninstall; then the same with 5 replicas. The replicas run
#      mutual TLS from a Secret made by deploy/tls/make-certs.sh (the chart's default) and
#      refuse a client without a certificate.
#
# Prints one line per check and `helm: N passed, M failed`; exits 1 on any failure.
# Needs go (helm and kubectl are built from Go modules by deploy/testbed/testbed, cached),
# cargo, curl, openssl, python3 (standard library only).
set -uo pipefail
set -f # no globbing: "kubectl auth can-i * *" below means the words

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
CHART="$ROOT/deploy/helm/phalanx"
TESTBED="$ROOT/deploy/testbed/testbed"

# A testbed of our own, so one at the default ports and dir (another CI step, a developer's)
# is never touched; the replicas' ports are the first free ones from PHALANX_HELM_PORT_BASE.
export PHALANX_TESTBED_DIR="${PHALANX_HELM_TESTBED_DIR:-/tmp/phalanx-testbed-helm}"
export PHALANX_ETCD_PORT="${PHALANX_HELM_ETCD_PORT:-22379}"
export PHALANX_ETCD_PEER_PORT="${PHALANX_HELM_ETCD_PEER_PORT:-22380}"
export PHALANX_APISERVER_PORT="${PHALANX_HELM_APISERVER_PORT:-22443}"
export PHALANX_KWOK_PORT="${PHALANX_HELM_KWOK_PORT:-20247}"
export PHALANX_KUBE_SCHEDULER_PORT="${PHALANX_HELM_KUBE_SCHEDULER_PORT:-20259}"
export PHALANX_HELM_PORT_BASE="${PHALANX_HELM_PORT_BASE:-27100}"
NS=phalanx-system
RELEASE=phalanx
SA="system:serviceaccount:$NS:phalanx"

OUT="$(mktemp -d "${TMPDIR:-/tmp}/phalanx-helm-e2e.XXXXXX")"
passed=0
failed=0
n=0

# check NAME COMMAND...: runs it, output kept in $OUT; one line either way.
check() {
  local name="$1"
  shift
  n=$((n + 1))
  if "$@" >"$OUT/check-$n.log" 2>&1; then
    passed=$((passed + 1))
    echo "helm: ok   $name"
  else
    failed=$((failed + 1))
    echo "helm: FAIL $name (output: $OUT/check-$n.log)"
    tail -n 15 "$OUT/check-$n.log" | sed 's/^/      /'
  fi
}

# refused NAME PATTERN COMMAND...: the command fails and says PATTERN.
refused() {
  local pattern="$1"
  shift
  if "$@" >"$OUT/refused.log" 2>&1; then
    echo "expected a refusal, it succeeded"
    return 1
  fi
  grep -q -- "$pattern" "$OUT/refused.log" || { cat "$OUT/refused.log"; return 1; }
}

finish() {
  echo "helm: wall time ${SECONDS}s"
  echo "helm: $passed passed, $failed failed (logs: $OUT)"
  [[ $failed -eq 0 ]]
}

# ------------------------------------------------------------------ tools
for tool in go cargo curl openssl python3; do
  command -v "$tool" >/dev/null 2>&1 || { echo "helm: FAIL '$tool' is not on PATH (needed by this script)"; exit 1; }
done
"$TESTBED" build --helm --kubectl || { echo "helm: FAIL building the testbed, helm and kubectl"; exit 1; }
HELM="$("$TESTBED" tool-path helm)"
KUBECTL="$("$TESTBED" tool-path kubectl)"
export PHALANX_HELM="$HELM"
echo "helm: using $("$HELM" version --short) and kubectl $("$KUBECTL" version --client -o json | sed -n 's/.*"gitVersion": *"\([^"]*\)".*/\1/p' | head -1)"

# ------------------------------------------------------------------ offline
crds_identical() {
  local f
  for f in podgroups queues; do
    cmp "$ROOT/deploy/crds/$f.yaml" "$CHART/crds/$f.yaml" || return 1
  done
  [[ "$(ls "$CHART/crds" | wc -l)" -eq 2 ]]
}
check "the chart's crds/ are deploy/crds/ byte for byte" crds_identical

VALUE_SETS=(
  ""
  "replicas=5"
  "replicas=1,podDisruptionBudget.enabled=false"
  "metrics.serviceMonitor.enabled=true,metrics.prometheusRule.enabled=true,networkPolicy.enabled=true"
  "podAntiAffinity=preferred,topologySpread.enabled=false,priorityClassName="
  "fullnameOverride=sched,clusterDomain=corp.example,ports.raft=9000,listenAddress=::"
  "serviceAccount.create=false,serviceAccount.name=existing,rbac.create=false"
  "tls.enabled=false"
  "tls.certManager.enabled=true,tls.certManager.issuerRef.name=phalanx-ca,replicas=5"
)
for set in "${VALUE_SETS[@]}"; do
  args=()
  [[ -n "$set" ]] && args=(--set "$set")
  check "helm lint --strict ${set:-(default values)}" "$HELM" lint --strict "$CHART" "${args[@]}"
  check "helm template ${set:-(default values)}" "$HELM" template "$RELEASE" "$CHART" -n "$NS" "${args[@]}"
done
check "replicas=0 is refused by the schema" refused "replicas" "$HELM" template x "$CHART" --set replicas=0
check "a misspelt key is refused by the schema" refused "replicaz" "$HELM" template x "$CHART" --set replicaz=3
check "rendered-YAML checks (cargo test --test integration helm_chart::)" \
  cargo test --workspace --test integration -- --ignored helm_chart:: --skip the_installed

# ------------------------------------------------------------------ testbed
if "$TESTBED" status >/dev/null 2>&1; then
  echo "helm: FAIL a testbed is already up at $PHALANX_TESTBED_DIR; run '$TESTBED down' with the same env"
  failed=$((failed + 1))
  finish
  exit 1
fi
trap '"$TESTBED" down >/dev/null 2>&1' EXIT
if ! "$TESTBED" up --nodes 16 >"$OUT/testbed-up.log" 2>&1; then
  tail -n 20 "$OUT/testbed-up.log"
  echo "helm: FAIL the testbed did not come up"
  failed=$((failed + 1))
  finish
  exit 1
fi
export KUBECONFIG="$("$TESTBED" kubeconfig-path)"
export PHALANX_E2E_KUBECONFIG="$KUBECONFIG"
k() { "$KUBECTL" "$@"; }

# The namespace as docs/install.md says: Pod Security "restricted" enforced.
k create namespace "$NS" >/dev/null
k label namespace "$NS" pod-security.kubernetes.io/enforce=restricted \
  pod-security.kubernetes.io/warn=restricted >/dev/null

dry_run() {
  k apply --server-side --dry-run=server -f "$CHART/crds/" &&
    "$HELM" template "$RELEASE" "$CHART" -n "$NS" "$@" |
    k apply --server-side --dry-run=server --field-manager=helm-e2e -f -
}
check "kubectl apply --server-side --dry-run=server (default values)" dry_run
check "kubectl apply --server-side --dry-run=server (networkPolicy, 5 replicas)" \
  dry_run --set networkPolicy.enabled=true,replicas=5

# The chart's default (tls.enabled) mounts Secret <release>-tls; its keys as docs/install.md
# makes them: ca.crt and replica-<id>.crt/.key, here for up to 5 replicas (the scale below).
tls_secret() {
  "$ROOT/deploy/tls/make-certs.sh" "$OUT/tls" 1 2 3 4 5 &&
    k -n "$NS" create secret generic "$RELEASE-tls" --from-file="$OUT/tls" >/dev/null &&
    [[ "$(k -n "$NS" get secret "$RELEASE-tls" -o go-template='{{range $k, $v := .data}}{{$k}} {{end}}')" == \
      "ca.crt replica-1.crt replica-1.key replica-2.crt replica-2.key replica-3.crt replica-3.key replica-4.crt replica-4.key replica-5.crt replica-5.key " ]]
}
check "the TLS Secret from deploy/tls/make-certs.sh (ca.crt, replica-1..5; not the CA key)" tls_secret

check "helm install" "$HELM" install "$RELEASE" "$CHART" -n "$NS"
installed() {
  local what
  for what in statefulset/phalanx service/phalanx-peers service/phalanx-metrics \
    serviceaccount/phalanx configmap/phalanx-config poddisruptionbudget/phalanx; do
    k -n "$NS" get "$what" -o name || return 1
  done
  k get clusterrole/phalanx clusterrolebinding/phalanx -o name &&
    k wait --for condition=Established --timeout=30s \
      crd/podgroups.scheduling.volcano.sh crd/queues.scheduling.volcano.sh
}
check "the release's objects exist and the CRDs are Established" installed

# A pod as the StatefulSet controller would make it (name, the claim's volume), created
# with a server dry run in the restricted namespace: PodSecurity admission judges it.
pod_from_statefulset() { # ordinal [python expression applied to the pod]
  k -n "$NS" get statefulset phalanx -o json | python3 -c '
import json, sys
sts = json.load(sys.stdin)
ordinal, tweak = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else ""
name = sts["metadata"]["name"] + "-" + ordinal
t = sts["spec"]["template"]
pod = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": name, "namespace": sts["metadata"]["namespace"],
                    "labels": t["metadata"].get("labels", {})},
       "spec": t["spec"]}
for c in sts["spec"].get("volumeClaimTemplates", []):
    claim = c["metadata"]["name"]
    pod["spec"].setdefault("volumes", []).append(
        {"name": claim, "persistentVolumeClaim": {"claimName": claim + "-" + name}})
if tweak:
    exec(tweak)
print(json.dumps(pod))
' "$@"
}
psa_admits() { pod_from_statefulset 0 | k create --dry-run=server -f -; }
psa_refuses_root() {
  pod_from_statefulset 0 'pod["spec"]["containers"][0]["securityContext"]["runAsNonRoot"] = False; pod["spec"]["securityContext"]["runAsNonRoot"] = False' |
    refused "violates PodSecurity" k create --dry-run=server -f -
}
check "Pod Security restricted admits the replicas' pod (server dry run)" psa_admits
check "Pod Security restricted is enforced (the same pod as root is refused)" psa_refuses_root

can() { [[ "$(k auth can-i "$@" --as="$SA" 2>/dev/null)" == yes ]]; }
cannot() { [[ "$(k auth can-i "$@" --as="$SA" 2>/dev/null)" == no ]]; }
needed_rights() {
  local r
  for r in "list nodes" "watch nodes" "get pods -n team-a" "list pods" "watch pods" \
    "list priorityclasses.scheduling.k8s.io" "watch priorityclasses.scheduling.k8s.io" \
    "list podgroups.scheduling.volcano.sh" "watch podgroups.scheduling.volcano.sh" \
    "patch podgroups.scheduling.volcano.sh -n team-a" \
    "list queues.scheduling.volcano.sh" "watch queues.scheduling.volcano.sh" \
    "create pods --subresource=binding -n team-a" \
    "create pods --subresource=eviction -n team-a" \
    "create events.events.k8s.io -n team-a" \
    "list leases.coordination.k8s.io -n $NS" "create leases.coordination.k8s.io -n $NS" \
    "patch leases.coordination.k8s.io -n $NS"; do
    # shellcheck disable=SC2086 # each entry is verb, resource and flags
    can $r || { echo "the service account cannot: $r"; return 1; }
  done
}
dangerous_rights() {
  local r
  for r in "update nodes" "patch nodes" "delete nodes" "delete pods -n team-a" \
    "create pods -n team-a" "update pods -n team-a" "patch pods -n team-a" \
    "get secrets -n $NS" "list secrets" "create customresourcedefinitions.apiextensions.k8s.io" \
    "update podgroups.scheduling.volcano.sh" "create podgroups.scheduling.volcano.sh" \
    "update queues.scheduling.volcano.sh" "create events -n team-a" "* *" \
    "create clusterrolebindings.rbac.authorization.k8s.io" "impersonate serviceaccounts" \
    "patch leases.coordination.k8s.io -n team-a" "delete leases.coordination.k8s.io -n $NS"; do
    # shellcheck disable=SC2086
    cannot $r || { echo "the service account CAN: $r"; return 1; }
  done
}
check "kubectl auth can-i: the service account has every right serve uses" needed_rights
check "kubectl auth can-i: and none of the dangerous ones" dangerous_rights
k auth can-i --list --as="$SA" >"$OUT/can-i-list.txt" 2>&1 || true
k auth can-i --list --as="$SA" -n "$NS" >"$OUT/can-i-list-$NS.txt" 2>&1 || true

# Scaling changes --peers on every pod; the Raft leader then follows it (serve/membership.rs,
# run on processes by e2e_shards). Here: the upgrade is taken and the StatefulSet says so.
sts_scaled_to() {
  local want="$1" replicas peers
  replicas="$(k -n "$NS" get statefulset phalanx -o jsonpath='{.spec.replicas}')" || return 1
  peers="$(k -n "$NS" get statefulset phalanx -o jsonpath='{.spec.template.spec.containers[0].args}' |
    tr ',' '\n' | grep -c '\.phalanx-peers\..*:7001')" || return 1
  [[ "$replicas" == "$want" && "$peers" == "$want" ]] ||
    { echo "replicas $replicas, $peers peers named; want $want"; return 1; }
}
scale_to() { "$HELM" upgrade "$RELEASE" "$CHART" -n "$NS" --reuse-values --set replicas="$1" >/dev/null && sts_scaled_to "$1"; }
check "helm upgrade to replicas=5: the StatefulSet runs 5 and every pod's --peers names 5" scale_to 5
check "helm upgrade back to replicas=3: 3 and 3" scale_to 3
check "helm upgrade with the same replicas goes through" \
  "$HELM" upgrade "$RELEASE" "$CHART" -n "$NS" --set scheduler.periodMs=500

# The service account's token in a kubeconfig: the replicas run as the chart's identity.
sa_kubeconfig() {
  local token server ca
  token="$(k -n "$NS" create token phalanx --duration=1h)" || return 1
  server="$(k config view --raw -o jsonpath='{.clusters[0].cluster.server}')"
  ca="$(k config view --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')"
  cat >"$OUT/sa-kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: testbed
  cluster: {server: "$server", certificate-authority-data: "$ca"}
users:
- name: phalanx-sa
  user: {token: "$token"}
contexts:
- name: phalanx-sa
  context: {cluster: testbed, user: phalanx-sa}
current-context: phalanx-sa
EOF
  chmod 600 "$OUT/sa-kubeconfig"
  KUBECONFIG="$OUT/sa-kubeconfig" k auth whoami -o jsonpath='{.status.userInfo.username}' | grep -qx "$SA"
}
check "a kubeconfig with the service account's token (kubectl create token)" sa_kubeconfig
run_pods() { # work namespace [replicas to scale to and back]
  PHALANX_HELM_SA_KUBECONFIG="$OUT/sa-kubeconfig" PHALANX_HELM_NAMESPACE="$NS" \
    PHALANX_HELM_STATEFULSET=phalanx PHALANX_HELM_WORK_NAMESPACE="$1" \
    PHALANX_HELM_RELEASE="$RELEASE" PHALANX_HELM_SCALE_TO="${2:-}" \
    cargo test --workspace --test integration -- --ignored --exact \
    helm_chart::the_installed_statefulsets_pods_as_processes_place_gangs_through_a_killed_leader_and_a_rolling_restart --nocapture
}
check "the installed StatefulSet's pods as processes: phalanx status lists them all, gangs placed through a SIGKILLed leader, a rolling restart, and helm upgrade 3 -> 5 -> 3" \
  run_pods helm-e2e-3 5
grep '^helm e2e: [oF]' "$OUT/check-$n.log" | sed 's/^/      /'

uninstalled() {
  "$HELM" uninstall "$RELEASE" -n "$NS" &&
    ! k -n "$NS" get statefulset/phalanx >/dev/null 2>&1 &&
    ! k get clusterrole/phalanx >/dev/null 2>&1 &&
    # helm never deletes what crds/ installed: PodGroups and Queues outlive the release.
    k get crd/podgroups.scheduling.volcano.sh -o name
}
check "helm uninstall removes the release and keeps the CRDs" uninstalled

# Five replicas from the start: a fresh install.
check "helm install --set replicas=5 (after the uninstall)" \
  "$HELM" install "$RELEASE" "$CHART" -n "$NS" --set replicas=5
check "a kubeconfig with the service account's token, for the new release" sa_kubeconfig
check "5 replicas as processes: phalanx status lists them all, gangs placed through a SIGKILLed leader and a rolling restart" run_pods helm-e2e-5
grep '^helm e2e: [oF]' "$OUT/check-$n.log" | sed 's/^/      /'
check "helm uninstall (5 replicas)" uninstalled

finish
