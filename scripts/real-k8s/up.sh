#!/usr/bin/env bash
# Starts a real Kubernetes control plane on 127.0.0.1 from the binaries in $REALK8S_HOME/bin:
# etcd (a free port), kube-apiserver (127.0.0.1:6443), kube-controller-manager, kube-scheduler;
# writes $REALK8S_HOME/admin.kubeconfig; creates the default no-provisioner StorageClass and a
# pool of hostPath PersistentVolumes (Released ones are recycled by a small loop).
#
#   scripts/real-k8s/up.sh            # control plane only
#   scripts/real-k8s/up.sh --node     # also a standing Steward node agent (Node `realk8s-node`)
#
# With --node the agent is $STEWARD_NODE_BIN, or built from this checkout with
# `cargo build -p steward-node` (CARGO_TARGET_DIR is honoured). It maps
# registry.k8s.io/pause to a sleeping script, so the conformance workload tests' Pods run.
# Every state is fresh (etcd data wiped) unless REALK8S_KEEP_DATA=1. Stop with down.sh.
set -euo pipefail
REALK8S_HOME=${REALK8S_HOME:-/root/.cache/real-k8s}
BIN=$REALK8S_HOME/bin
RUN=$REALK8S_HOME/run
PKI=$REALK8S_HOME/pki
KUBECONFIG_ADMIN=$REALK8S_HOME/admin.kubeconfig
KUBECTL=${KUBECTL:-$HOME/.cache/steward-ci/kubectl-venv/bin/kubectl}
APISERVER_PORT=${APISERVER_PORT:-6443}
SERVICE_CIDR=${SERVICE_CIDR:-127.96.0.0/16}
SERVICE_IP=${SERVICE_IP:-127.96.0.1}
PV_COUNT_1G=${PV_COUNT_1G:-24}
PV_COUNT_10G=${PV_COUNT_10G:-4}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
NODE=0
for a in "$@"; do
  case $a in
    --node) NODE=1 ;;
    -h|--help) sed -n 2,13p "$0"; exit 0 ;;
    *) echo "unknown argument $a" >&2; exit 2 ;;
  esac
done
log() { echo "[up $(date -u +%H:%M:%S)] $*"; }
die() { echo "up.sh: $*" >&2; exit 1; }

for b in etcd kube-apiserver kube-controller-manager kube-scheduler; do
  [ -x "$BIN/$b" ] || die "$BIN/$b missing: run $REALK8S_HOME/build.sh first, or on a new machine build them as scripts/real-k8s/README.md says"
done
[ -x "$KUBECTL" ] || KUBECTL=$(command -v kubectl) || die "no kubectl (set KUBECTL)"
for p in "$RUN"/*.pid; do
  [ -e "$p" ] || continue
  if kill -0 "$(cat "$p")" 2>/dev/null; then die "$(basename "$p" .pid) is running already (down.sh first)"; fi
  rm -f "$p"
done
if ss -ltn "( sport = :$APISERVER_PORT )" | grep -q LISTEN; then die "port $APISERVER_PORT is taken"; fi

mkdir -p "$RUN" "$PKI"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# --- certificates (kept across runs) ---------------------------------------------------------------
cert() { # name CN O [ext-file]
  local name=$1 cn=$2 o=$3 ext=${4:-}
  [ -f "$PKI/$name.crt" ] && return 0
  openssl genrsa -out "$PKI/$name.key" 2048 2>/dev/null
  local subj="/CN=$cn"; [ -n "$o" ] && subj="/O=$o$subj"
  openssl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
    -days 3650 -sha256 -out "$PKI/$name.crt" ${ext:+-extfile "$ext"} 2>/dev/null
  rm -f "$PKI/$name.csr"
}
if [ ! -f "$PKI/ca.crt" ]; then
  log "generating certificates in $PKI"
  openssl genrsa -out "$PKI/ca.key" 2048 2>/dev/null
  openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=realk8s-ca" -days 3650 -sha256 \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
    -out "$PKI/ca.crt"
fi
cat > "$PKI/server.ext" <<EOF
basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,IP:$SERVICE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
EOF
cat > "$PKI/client.ext" <<EOF
basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth
EOF
cert apiserver kube-apiserver "" "$PKI/server.ext"
cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters "$PKI/client.ext"
cert admin kubernetes-admin system:masters "$PKI/client.ext"
cert controller-manager system:kube-controller-manager "" "$PKI/client.ext"
cert scheduler system:kube-scheduler "" "$PKI/client.ext"
if [ ! -f "$PKI/sa.key" ]; then
  openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
  openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
fi

kubeconfig() { # file cert-name user
  cat > "$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: realk8s
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority: $PKI/ca.crt
users:
- name: $3
  user:
    client-certificate: $PKI/$2.crt
    client-key: $PKI/$2.key
contexts:
- name: realk8s
  context: {cluster: realk8s, user: $3}
current-context: realk8s
EOF
}
kubeconfig "$KUBECONFIG_ADMIN" admin kubernetes-admin
kubeconfig "$RUN/controller-manager.kubeconfig" controller-manager system:kube-controller-manager
kubeconfig "$RUN/scheduler.kubeconfig" scheduler system:kube-scheduler

start() { # name args...
  local name=$1; shift
  log "starting $name (log $RUN/$name.log)"
  nohup "$@" > "$RUN/$name.log" 2>&1 < /dev/null &
  echo $! > "$RUN/$name.pid"
}
wait_for() { # what seconds command...
  local what=$1 secs=$2; shift 2
  for _ in $(seq 1 "$((secs * 2))"); do
    if "$@" > /dev/null 2>&1; then return 0; fi
    sleep 0.5
  done
  die "$what not up after ${secs}s (logs in $RUN)"
}
UP_OK=0
trap '[ "$UP_OK" = 1 ] || { echo "up.sh failed; stopping what it started" >&2; "$HERE/down.sh" >&2 || true; }' EXIT

# --- etcd ------------------------------------------------------------------------------------------
if [ "${REALK8S_KEEP_DATA:-0}" != 1 ]; then rm -rf "$RUN/etcd-data" "$RUN/node" "$RUN/pv"; fi
ETCD_PORT=$(free_port); ETCD_PEER_PORT=$(free_port)
echo "$ETCD_PORT" > "$RUN/etcd.port"
start etcd "$BIN/etcd" --name realk8s --data-dir "$RUN/etcd-data" \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster "realk8s=http://127.0.0.1:$ETCD_PEER_PORT" --unsafe-no-fsync --quota-backend-bytes 4294967296
wait_for etcd 30 curl -fsS "http://127.0.0.1:$ETCD_PORT/health"

# --- kube-apiserver --------------------------------------------------------------------------------
start kube-apiserver "$BIN/kube-apiserver" \
  --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
  --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$APISERVER_PORT" \
  --cert-dir "$RUN/apiserver-certs" \
  --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
  --client-ca-file "$PKI/ca.crt" \
  --authorization-mode Node,RBAC \
  --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-cluster-ip-range "$SERVICE_CIDR" \
  --allow-privileged=true \
  --endpoint-reconciler-type none \
  --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
  --kubelet-preferred-address-types InternalIP,Hostname \
  --profiling=false --v "${APISERVER_V:-1}"
wait_for kube-apiserver 120 "$KUBECTL" --kubeconfig "$KUBECONFIG_ADMIN" get --raw /readyz

# --- controller-manager and scheduler --------------------------------------------------------------
start kube-controller-manager "$BIN/kube-controller-manager" \
  --kubeconfig "$RUN/controller-manager.kubeconfig" \
  --authentication-kubeconfig "$RUN/controller-manager.kubeconfig" \
  --authorization-kubeconfig "$RUN/controller-manager.kubeconfig" \
  --bind-address 127.0.0.1 --secure-port 0 --leader-elect=false \
  --use-service-account-credentials \
  --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
  --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
  --service-cluster-ip-range "$SERVICE_CIDR" \
  --controllers '*,-service-ca-certificate-publisher-controller' --v 1
start kube-scheduler "$BIN/kube-scheduler" \
  --kubeconfig "$RUN/scheduler.kubeconfig" \
  --authentication-kubeconfig "$RUN/scheduler.kubeconfig" \
  --authorization-kubeconfig "$RUN/scheduler.kubeconfig" \
  --bind-address 127.0.0.1 --secure-port 0 --leader-elect=false --v 1

k() { "$KUBECTL" --kubeconfig "$KUBECONFIG_ADMIN" "$@"; }
# The default ServiceAccount of `default` appears once the controller-manager runs.
wait_for "controller-manager (default ServiceAccount)" 90 k -n default get serviceaccount default

# --- storage ---------------------------------------------------------------------------------------
log "default StorageClass and ${PV_COUNT_1G}x1Gi + ${PV_COUNT_10G}x10Gi hostPath PersistentVolumes under $RUN/pv"
{
  cat <<EOF
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: standard
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
reclaimPolicy: Delete
EOF
  pv() { # name size
    mkdir -p "$RUN/pv/$1" && chmod 0777 "$RUN/pv/$1"  # as local-path-provisioner makes them
    cat <<EOF
---
apiVersion: v1
kind: PersistentVolume
metadata:
  name: $1
  labels: {realk8s/pool: "true"}
spec:
  capacity: {storage: $2}
  accessModes: [ReadWriteOnce, ReadOnlyMany, ReadWriteMany]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: standard
  volumeMode: Filesystem
  hostPath: {path: $RUN/pv/$1, type: DirectoryOrCreate}
EOF
  }
  for i in $(seq 1 "$PV_COUNT_1G"); do pv "pool-1g-$i" 1Gi; done
  for i in $(seq 1 "$PV_COUNT_10G"); do pv "pool-10g-$i" 10Gi; done
} > "$RUN/storage.yaml"
k apply -f "$RUN/storage.yaml" > /dev/null

# Released pool volumes: wipe the directory and drop the claim reference, so they are Available again.
cat > "$RUN/recycle.sh" <<EOF
#!/usr/bin/env bash
while sleep 5; do
  "$KUBECTL" --kubeconfig "$KUBECONFIG_ADMIN" get pv -l realk8s/pool=true \
    -o jsonpath='{range .items[?(@.status.phase=="Released")]}{.metadata.name}{"\n"}{end}' 2>/dev/null |
  while read -r pv; do
    [ -n "\$pv" ] || continue
    rm -rf "$RUN/pv/\$pv" && mkdir -p -m 0777 "$RUN/pv/\$pv"
    "$KUBECTL" --kubeconfig "$KUBECONFIG_ADMIN" patch pv "\$pv" --type json \
      -p '[{"op":"remove","path":"/spec/claimRef"}]' >/dev/null 2>&1 && echo "\$(date -u +%T) recycled \$pv"
  done
done
EOF
chmod +x "$RUN/recycle.sh"
start pv-recycler "$RUN/recycle.sh"

# --- optional standing node agent ------------------------------------------------------------------
if [ "$NODE" = 1 ]; then
  NODE_BIN=${STEWARD_NODE_BIN:-}
  if [ -z "$NODE_BIN" ]; then
    log "building steward-node (nice cargo build -p steward-node)"
    (cd "$REPO" && nice -n 10 cargo build -q -p steward-node)
    NODE_BIN=${CARGO_TARGET_DIR:-$REPO/target}/debug/steward-node
  fi
  [ -x "$NODE_BIN" ] || die "no steward-node binary at $NODE_BIN"
  cat > "$RUN/pause" <<'EOF'
#!/bin/sh
# registry.k8s.io/pause for the Steward node agent: sleep until stopped.
trap 'exit 0' TERM INT
while :; do sleep 3600 & wait $!; done
EOF
  chmod +x "$RUN/pause"
  mkdir -p "$RUN/node"
  start steward-node env RUST_LOG="${NODE_LOG:-info}" "$NODE_BIN" --kubeconfig "$KUBECONFIG_ADMIN" \
    --name realk8s-node --state-dir "$RUN/node" --pod-ip-base 198.18.0.1 \
    --images "registry.k8s.io/pause=$RUN/pause,pause=$RUN/pause"
  wait_for "Node realk8s-node Ready" 60 bash -c \
    "'$KUBECTL' --kubeconfig '$KUBECONFIG_ADMIN' get node realk8s-node -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True"
fi

UP_OK=1
log "up: $(k get --raw /version | python3 -c 'import json,sys; print(json.load(sys.stdin)["gitVersion"])') at https://127.0.0.1:$APISERVER_PORT, etcd at 127.0.0.1:$ETCD_PORT"
log "export KUBECONFIG=$KUBECONFIG_ADMIN   (stop with scripts/real-k8s/down.sh)"
