#!/usr/bin/env bash
# render-deploy.sh [--check]: deploy/ is rendered from the Helm chart
# (deploy/helm/netendpoint), its one source: `helm template` with the
# chart's defaults, but bare image names (`netendpoint`,
# `netendpoint-watcher-example`) that deploy/kustomization.yaml maps to
# references. Each template templates/X.yaml becomes deploy/X.yaml; a
# template that renders nothing with the defaults (net-conf.yaml: no pools)
# has no file. templates/crd.yaml is what crdgen prints (`make crd`), so
# deploy/crd.yaml is too.
#
# --check writes nothing and fails if deploy/ differs from the chart's
# render (run `make deploy`), and also checks that the chart with its
# defaults and the kustomize tree (kubectl kustomize deploy/, plus
# deploy/namespace.yaml) make the same objects.
set -euo pipefail
cd "$(dirname "$0")/.."
helm=${HELM:-tests/bin/helm}
kubectl=${KUBECTL:-tests/bin/kubectl}
chart=deploy/helm/netendpoint
check=0
[ "${1:-}" = --check ] && check=1
[ -x "$helm" ] || { echo "render-deploy: no $helm (scripts/tools.sh builds it)" >&2; exit 1; }
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT

# The kustomize tree owns its namespace (the chart leaves it to the user by default).
cat > "$work/kustomize-base.yaml" <<'YAML'
namespace: {create: true}
image: {repository: netendpoint, tag: ""}
agentImage: {repository: netendpoint-watcher-example, tag: ""}
YAML
"$helm" template netendpoint "$chart" --namespace netendpoint-system -f "$work/kustomize-base.yaml" > "$work/all.yaml"
mkdir -p "$work/deploy"
# Split by the "# Source: netendpoint/templates/X.yaml" line helm puts on
# every document; documents of one template are joined by "---" again.
# Blank lines at the end of a document (helm adds one) are dropped.
awk -v dir="$work/deploy" '
  /^---$/ { blanks = 0; next }
  /^# Source: netendpoint\/templates\// { f = dir "/" substr($0, length("# Source: netendpoint/templates/") + 1)
    if (f in seen) print "---" > f; seen[f] = 1; blanks = 0; next }
  f == "" { next }
  /^$/ { blanks++; next }
  { while (blanks > 0) { print "" > f; blanks-- } print > f }' "$work/all.yaml"
for f in "$work"/deploy/*.yaml; do
  name=${f##*/}
  if [ "$name" != crd.yaml ]; then
    { echo "# Generated from deploy/helm/netendpoint/templates/$name by scripts/render-deploy.sh"
      echo "# (make deploy): edit the chart, not this file."
      cat "$f"; } > "$f.new" && mv "$f.new" "$f"
  fi
done

templates=$(cd "$chart/templates" && ls *.yaml)
if [ "$check" = 0 ]; then
  for t in $templates; do
    if [ -f "$work/deploy/$t" ]; then cp "$work/deploy/$t" "deploy/$t"; fi
  done
  echo "deploy/ rendered from $chart: $(cd "$work/deploy" && ls | tr '\n' ' ')"
  exit 0
fi

stale=()
for t in $templates; do
  if [ -f "$work/deploy/$t" ]; then
    cmp -s "$work/deploy/$t" "deploy/$t" || stale+=("deploy/$t")
  elif [ -f "deploy/$t" ]; then
    stale+=("deploy/$t (the chart renders none)")
  fi
done
if [ ${#stale[@]} -gt 0 ]; then
  echo "render-deploy: stale, not what the chart renders: ${stale[*]}; run make deploy" >&2
  diff -u "deploy/${stale[0]#deploy/}" "$work/deploy/${stale[0]#deploy/}" 2>/dev/null | head -n 40 >&2 || true
  exit 1
fi
# The same objects both ways: the chart with its defaults (and its namespace,
# which the user makes beside it), and the kustomize
# tree with what users apply beside it.
objects() { # YAML on stdin -> one canonical JSON object per line, sorted
  "$kubectl" annotate --local -f - netendpoint.dev/none- -o json | jq -cS '(.items // [.])[]' | sort
}
"$helm" template netendpoint "$chart" --namespace netendpoint-system --set namespace.create=true | objects > "$work/helm.json"
{ "$kubectl" kustomize deploy; echo "---"; cat deploy/namespace.yaml; } |
  objects | sort -u > "$work/kustomize.json"
if ! cmp -s "$work/helm.json" "$work/kustomize.json"; then
  echo "render-deploy: the chart and the kustomize tree make different objects:" >&2
  diff <(jq -r '"\(.kind)/\(.metadata.name)"' "$work/helm.json") <(jq -r '"\(.kind)/\(.metadata.name)"' "$work/kustomize.json") >&2 || true
  diff <(jq -S . "$work/helm.json") <(jq -S . "$work/kustomize.json") | head -n 40 >&2 || true
  exit 1
fi
echo "render-deploy: deploy/ is the chart's render, and both make the same $(wc -l < "$work/helm.json") objects"
