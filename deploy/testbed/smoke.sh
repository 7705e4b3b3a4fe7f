#!/usr/bin/env bash
# Smoke test of the phalanx testbed: build (cached), up with 16 nodes x 8 GPUs,
# bind pods through pods/binding with curl, watch kwok run and complete them,
# install phalanx's PodGroup and Queue CRDs (deploy/crds/) and create the seed
# objects, down.  Exits non-zero with a message on any failure; prints one summary line.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TB="$HERE/testbed"
CRDS="$HERE/../crds"
SEED="$HERE/seed"
NODES="${SMOKE_NODES:-16}"
GPUS="${SMOKE_GPUS:-8}"
NS=phalanx-smoke
T_START=$SECONDS

LOGS_KEPT="${SMOKE_LOG_DIR:-/tmp/phalanx-smoke-logs}"

UP=0
fail() {
  echo "SMOKE FAIL: $*" >&2
  if [[ $UP == 1 ]]; then
    local run
    run="$(dirname "$("$TB" kubeconfig-path)")"
    for l in etcd kube-apiserver kwok; do
      echo "---- last lines of $run/logs/$l.log" >&2
      tail -n 15 "$run/logs/$l.log" >&2 2>/dev/null || true
    done
    rm -rf "$LOGS_KEPT" && mkdir -p "$LOGS_KEPT" && cp -r "$run/logs/." "$LOGS_KEPT/" 2>/dev/null &&
      echo "SMOKE: full logs copied to $LOGS_KEPT" >&2
  fi
  exit 1
}
cleanup() {
  local rc=$?
  if [[ $UP == 1 ]]; then
    "$TB" down >/dev/null 2>&1 || echo "SMOKE: testbed down failed" >&2
  fi
  exit $rc
}
trap cleanup EXIT
trap 'fail "interrupted"' INT TERM

command -v go >/dev/null 2>&1 ||
  fail "Go is not installed (the 'go' tool is not on PATH); the testbed builds kube-apiserver, etcd and kwok from Go modules - install Go >= 1.26"
command -v curl >/dev/null 2>&1 || fail "curl is not installed"
command -v openssl >/dev/null 2>&1 || fail "openssl is not installed"
for f in "$CRDS/podgroups.yaml" "$CRDS/queues.yaml" "$SEED/queue-research-team.yaml" \
  "$SEED/podgroup-tf-distributed-job.yaml" "$SEED/podgroup-tf-distributed-job-plain.yaml"; do
  [[ -f "$f" ]] || fail "$f is missing"
done

if "$TB" status >/dev/null 2>&1; then
  fail "a testbed is already up at $(dirname "$("$TB" kubeconfig-path)"); run '$TB down' first, or give the smoke test its own PHALANX_TESTBED_DIR and PHALANX_*_PORT values"
fi

"$TB" build || fail "testbed build failed"
UP=1
T_UP=$SECONDS
"$TB" up --nodes "$NODES" --gpus-per-node "$GPUS" || fail "testbed up failed"
UP_S=$((SECONDS - T_UP))

KC="$("$TB" kubeconfig-path)"
RUN="$(dirname "$KC")"
PORT="$(sed -n 's#.*server: https://127.0.0.1:\([0-9]*\).*#\1#p' "$KC")"
API="https://127.0.0.1:$PORT"

# k METHOD PATH [BODY]: prints the body, fails on HTTP >= 400 unless ALLOW=1.
# The body is JSON unless CT names another content type (application/yaml, ...).
k() {
  local method="$1" path="$2" body="${3:-}" out code
  out="$(mktemp)"
  code="$(curl -sS -A phalanx-smoke -o "$out" -w '%{http_code}' -X "$method" \
    --cacert "$RUN/pki/ca.crt" --cert "$RUN/pki/admin.crt" --key "$RUN/pki/admin.key" \
    -H "Content-Type: ${CT:-application/json}" ${body:+--data-binary "$body"} "$API$path")" ||
    { rm -f "$out"; fail "$method $path: curl failed"; }
  cat "$out"
  local said
  said="$(head -c 600 "$out")"
  rm -f "$out"
  if [[ "$code" -ge 400 && "${ALLOW:-0}" != 1 ]]; then
    echo >&2
    fail "$method $path -> HTTP $code: $said"
  fi
}
field() { { grep -o "\"$1\": *\"[^\"]*\"" || true; } | head -1 | cut -d'"' -f4; }

# wait_phase POD PHASE TIMEOUT_S -> prints seconds taken
wait_phase() {
  local pod="$1" want="$2" t="$3" start=$SECONDS ph=""
  while ((SECONDS - start <= t)); do
    ph="$(k GET "/api/v1/namespaces/$NS/pods/$pod" | field phase)"
    if [[ "$ph" == "$want" ]]; then
      echo $((SECONDS - start))
      return 0
    fi
    sleep 0.5
  done
  fail "pod $pod is '$ph', not '$want' after ${t}s (kwok log: $RUN/logs/kwok.log)"
}

# 1. the real version and the nodes
VER="$(k GET /version | field gitVersion)"
[[ "$VER" == v1.* ]] || fail "/version reports '$VER'"
NODE_JSON="$(k GET '/api/v1/nodes?labelSelector=type%3Dkwok')"
N="$(grep -o '"type":"Ready","status":"True"' <<<"$NODE_JSON" | wc -l)"
[[ "$N" -eq "$NODES" ]] || fail "$N of $NODES nodes are Ready"
G="$(grep -o '"allocatable":{[^}]*}' <<<"$NODE_JSON" | grep -c "\"nvidia.com/gpu\":\"$GPUS\"")"
[[ "$G" -eq "$NODES" ]] || fail "$G of $NODES nodes have allocatable nvidia.com/gpu=$GPUS"
TAINTS="$(grep -c '"taints"' <<<"$NODE_JSON" || true)"
[[ "$TAINTS" -eq 0 ]] || fail "nodes carry taints (TaintNodesByCondition should be off)"

# 2. PriorityClass and namespace
k POST /apis/scheduling.k8s.io/v1/priorityclasses \
  '{"apiVersion":"scheduling.k8s.io/v1","kind":"PriorityClass","metadata":{"name":"phalanx-smoke-high"},"value":1000,"description":"smoke"}' >/dev/null
k POST /api/v1/namespaces '{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"'$NS'"}}' >/dev/null

pod_json() { # name annotations-json
  cat <<EOF
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"$1","annotations":$2},
 "spec":{"schedulerName":"phalanx","priorityClassName":"phalanx-smoke-high",
  "containers":[{"name":"main","image":"phalanx-sim:fake",
   "resources":{"requests":{"cpu":"1","memory":"1Gi","nvidia.com/gpu":"1"},"limits":{"nvidia.com/gpu":"1"}}}]}}
EOF
}
bind() { # pod node
  k POST "/api/v1/namespaces/$NS/pods/$1/binding" \
    '{"apiVersion":"v1","kind":"Binding","metadata":{"name":"'"$1"'"},"target":{"apiVersion":"v1","kind":"Node","name":"'"$2"'"}}' >/dev/null
}

# 3. a pod without nodeName stays Pending (nothing schedules it), is bound by us, runs
P="$(k POST "/api/v1/namespaces/$NS/pods" "$(pod_json smoke-run '{}')")"
grep -q '"priority":1000' <<<"$P" || fail "Priority admission did not resolve priorityClassName to 1000"
grep -q '"nodeName"' <<<"$P" && fail "pod smoke-run got a nodeName at creation"
sleep 1
[[ "$(k GET "/api/v1/namespaces/$NS/pods/smoke-run" | field phase)" == Pending ]] ||
  fail "unbound pod smoke-run is not Pending"
bind smoke-run gpu-node-0003
RUN_S="$(wait_phase smoke-run Running 30)"
POD="$(k GET "/api/v1/namespaces/$NS/pods/smoke-run")"
[[ "$(field nodeName <<<"$POD")" == gpu-node-0003 ]] || fail "smoke-run is not on gpu-node-0003"
[[ -n "$(field podIP <<<"$POD")" ]] || fail "kwok gave smoke-run no podIP"

# 4. a pod with a simulated duration completes
k POST "/api/v1/namespaces/$NS/pods" "$(pod_json smoke-job '{"phalanx.dev/sim-duration":"3s"}')" >/dev/null
bind smoke-job gpu-node-0007
wait_phase smoke-job Running 30 >/dev/null
DONE_S="$(wait_phase smoke-job Succeeded 40)"
((DONE_S >= 2)) || fail "smoke-job succeeded after ${DONE_S}s, before its 3s sim-duration"

# 5. deleting a running pod removes it (kwok plays the kubelet's part)
k DELETE "/api/v1/namespaces/$NS/pods/smoke-run" >/dev/null
GONE=0
for _ in $(seq 1 60); do
  if ALLOW=1 k GET "/api/v1/namespaces/$NS/pods/smoke-run" | grep -q '"code":404'; then
    GONE=1
    break
  fi
  sleep 0.5
done
[[ $GONE == 1 ]] || fail "deleted pod smoke-run still exists after 30s"

# 6. our CRDs install, are Established, and the API server validates objects against them
T_CRD=$SECONDS
CRD_API=/apis/apiextensions.k8s.io/v1/customresourcedefinitions
for f in podgroups queues; do
  CT=application/yaml k POST "$CRD_API" "$(cat "$CRDS/$f.yaml")" >/dev/null
done
for crd in podgroups queues; do
  ok=0
  for _ in $(seq 1 60); do
    if k GET "$CRD_API/$crd.scheduling.volcano.sh" | grep -q '"type":"Established","status":"True"'; then
      ok=1
      break
    fi
    sleep 0.5
  done
  [[ $ok == 1 ]] || fail "CRD $crd.scheduling.volcano.sh is not Established after 30s"
done
CRD_S=$((SECONDS - T_CRD))
DISC="$(k GET /apis/scheduling.volcano.sh/v1beta1)"
grep -q '"name":"podgroups","singularName":"podgroup","namespaced":true,"kind":"PodGroup"' <<<"$DISC" ||
  fail "discovery does not list podgroups as a namespaced PodGroup: $DISC"
grep -q '"name":"queues","singularName":"queue","namespaced":false,"kind":"Queue"' <<<"$DISC" ||
  fail "discovery does not list queues as a cluster-scoped Queue: $DISC"
grep -q '"shortNames":\["pg","podgroup-v1beta1"\]' <<<"$DISC" || fail "podgroups lack Volcano's short names"
grep -q '"name":"queues/status"' <<<"$DISC" || fail "queues have no status subresource"
# As in Volcano, a PodGroup's status is written with the object (no status subresource).
grep -q '"name":"podgroups/status"' <<<"$DISC" && fail "podgroups have a status subresource; Volcano's have none"

VQ=/apis/scheduling.volcano.sh/v1beta1
Q="$(CT=application/yaml k POST "$VQ/queues" "$(cat "$SEED/queue-research-team.yaml")")"
grep -q '"nvidia.com/gpu":16' <<<"$Q" || fail "the seed Queue came back without capability nvidia.com/gpu: 16: $Q"
grep -q '"memory":"200Gi"' <<<"$Q" || fail "the seed Queue came back without guarantee memory: 200Gi: $Q"
# The seed PodGroup as the article writes it (minResources: {requests: {...}}) is refused,
# as Volcano's CRD refuses it; the plain resource list is accepted.
BAD="$(CT=application/yaml ALLOW=1 k POST "$VQ/namespaces/default/podgroups" "$(cat "$SEED/podgroup-tf-distributed-job.yaml")")"
grep -q '"code":422' <<<"$BAD" && grep -q 'spec.minResources.requests' <<<"$BAD" ||
  fail "the seed PodGroup with minResources.requests was not refused by schema validation: $BAD"
PG="$(CT=application/yaml k POST "$VQ/namespaces/default/podgroups" "$(cat "$SEED/podgroup-tf-distributed-job-plain.yaml")")"
grep -q '"minMember":11' <<<"$PG" && grep -q '"nvidia.com/gpu":11' <<<"$PG" ||
  fail "the seed PodGroup came back changed: $PG"
WRONG="$(ALLOW=1 k POST "$VQ/namespaces/default/podgroups" \
  '{"apiVersion":"scheduling.volcano.sh/v1beta1","kind":"PodGroup","metadata":{"name":"wrong"},"spec":{"minMember":"eleven","minResources":{"cpu":"4 cores"}}}')"
grep -q '"code":422' <<<"$WRONG" && grep -q 'spec.minMember' <<<"$WRONG" && grep -q 'spec.minResources.cpu' <<<"$WRONG" ||
  fail "a PodGroup with minMember \"eleven\" and cpu \"4 cores\" was not refused: $WRONG"
ST="$(CT=application/merge-patch+json k PATCH "$VQ/namespaces/default/podgroups/tf-distributed-job" \
  '{"status":{"phase":"Inqueue","conditions":[{"type":"Unschedulable","status":"True","reason":"NotEnoughResources","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}')"
grep -q '"phase":"Inqueue"' <<<"$ST" || fail "the PodGroup did not take status phase Inqueue: $ST"
QS="$(CT=application/merge-patch+json k PATCH "$VQ/queues/research-team/status" \
  '{"status":{"state":"Open","running":1,"allocated":{"nvidia.com/gpu":"8"}}}')"
grep -q '"state":"Open"' <<<"$QS" || fail "the Queue's status subresource did not take state Open: $QS"

"$TB" down >/dev/null || fail "testbed down failed"
UP=0
[[ ! -e "$RUN" ]] || fail "down left $RUN behind"

echo "SMOKE OK: kube-apiserver $VER, $NODES nodes x $GPUS GPUs up in ${UP_S}s, bound pod Running after ${RUN_S}s, sim-duration 3s pod Succeeded after ${DONE_S}s, delete ok, CRDs Established after ${CRD_S}s, seed Queue and PodGroup accepted, total $((SECONDS - T_START))s"
