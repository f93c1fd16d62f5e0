#!/usr/bin/env bash
# release-check.sh [VERSION]: the release is reproducible. Builds the release
# of VERSION (default: the newest entry of CHANGELOG.md) twice with
# scripts/release.sh, into $RELEASE_CHECK_DIR/a and /b (default
# target/release-check), the second time with cargo in a target directory of
# its own ($RELEASE_CHECK_DIR/target), so its binaries are compiled anew and
# not taken from the first build; then requires the same index digests and
# the same bytes in every file (image archives, chart, SBOMs, images.txt,
# SHA256SUMS) but the signatures: those differ at every signing (ECDSA), and
# each build's are verified by its own scripts/release-verify.sh run.
# RELEASE_CHECK_FRESH=1 empties that target directory first (a
# cold second build; otherwise it is kept between runs, like target/).
# It also runs scripts/release-verify-selftest.sh on the first build.
# Both builds are signed with RELEASE_SIGNING_KEY (and COSIGN_PASSWORD,
# RELEASE_PUBLIC_KEY) if given, else with a throwaway key pair made for
# this run and deleted after it.
# Not part of `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."
cosign=${COSIGN:-tests/bin/cosign}
keys=$(mktemp -d); trap 'rm -rf "$keys"' EXIT
if [ -z "${RELEASE_SIGNING_KEY:-}" ]; then
  COSIGN_PASSWORD=$(head -c 24 /dev/urandom | base64)
  export COSIGN_PASSWORD RELEASE_SIGNING_KEY=$keys/throwaway.key RELEASE_PUBLIC_KEY=$keys/throwaway.pub
  "$cosign" generate-key-pair --output-key-prefix "$keys/throwaway" >/dev/null 2>&1 ||
    { echo "release-check: cosign generate-key-pair failed ($cosign; scripts/release-tools.sh builds it)" >&2; exit 1; }
  echo "release-check: signing with a throwaway key pair (deleted after the run)"
elif [ -z "${RELEASE_PUBLIC_KEY:-}" ]; then
  "$cosign" public-key --key "$RELEASE_SIGNING_KEY" --outfile "$keys/release.pub" >/dev/null 2>&1 ||
    { echo "release-check: cosign cannot read RELEASE_SIGNING_KEY=$RELEASE_SIGNING_KEY" >&2; exit 1; }
  export RELEASE_PUBLIC_KEY=$keys/release.pub
fi
# One time for both builds (the chart's files and the SBOMs carry it), even
# if a commit lands while they run.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
version=${1:-$(sed -n 's/^## \[\([^]]*\)\].*/\1/p' CHANGELOG.md | head -n1)}
[ -n "$version" ] || { echo "release-check: no VERSION and no entry in CHANGELOG.md" >&2; exit 2; }
base=${RELEASE_CHECK_DIR:-target/release-check}
mkdir -p "$base"; base=$(cd "$base" && pwd)
[ "${RELEASE_CHECK_FRESH:-0}" = 1 ] && rm -rf "$base/target"
start=$(date +%s)
echo "##### release-check: first build of $version"
RELEASE_OUT=$base/a scripts/release.sh "$version"
mid=$(date +%s)
echo "##### release-check: second build of $version (cargo target directory $base/target)"
CARGO_TARGET_DIR=$base/target RELEASE_OUT=$base/b scripts/release.sh "$version"
end=$(date +%s)
echo "##### release-check: release-verify.sh refuses bad releases"
scripts/release-verify-selftest.sh "$base/a" "$version"
echo "##### release-check: comparing"
fail=0
a=$(cd "$base/a" && find . -type f | sort) b=$(cd "$base/b" && find . -type f | sort)
[ "$a" = "$b" ] || { echo "release-check: the two builds wrote different files" >&2; diff <(echo "$a") <(echo "$b") >&2 || true; fail=1; }
for f in $a; do
  if [[ "$f" == *.sig ]]; then
    echo "  signed: ${f#./} (verified in both builds; a signature differs at every signing)"
  elif cmp -s "$base/a/$f" "$base/b/$f"; then
    echo "  same: ${f#./}  sha256:$(sha256sum "$base/a/$f" | cut -c1-64)"
  else
    echo "  DIFFERENT: ${f#./}" >&2; fail=1
  fi
done
if [ "$fail" != 0 ]; then
  diff "$base/a/images.txt" "$base/b/images.txt" >&2 || true
  echo "release-check: FAILED: the two builds of $version differ" >&2; exit 1
fi
echo "index digests (both builds):"
awk '{ print "  " $1 "@" $2; for (i = 4; i <= NF; i++) print "    " $i }' "$base/a/images.txt"
echo "SBOMs:"
for f in "$base"/a/*.spdx.json; do
  echo "  $(basename "$f"): the image and $(jq '.packages | length - 1' "$f") crates, $(stat -c %s "$f") bytes"
done
echo "release-check: passed: two builds of $version gave the same bytes (first $((mid - start)) s, second $((end - mid)) s)"
