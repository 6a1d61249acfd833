#!/usr/bin/env bash
# Runs the README's two commands verbatim in a fresh clone, so the README cannot drift from what
# works:
#   scripts/readme_check.sh [REPO]    (default: this repository's committed HEAD)
# The commands are the lines of the first ```sh block after the "readme-check" marker in README.md,
# read from the clone itself. Each runs with bash in the clone's root; the first failing one fails
# the check. Then ctest's skipped tests are compared with ALLOWED_SKIPS (space-separated test
# names, set by .ci/run): a test that this machine can run must not be skipped here.
# Env: KEEP=1 keeps the clone (its path is printed); LMFUSE_README_CLONE=DIR clones into DIR.
set -euo pipefail
repo=${1:-$(cd "$(dirname "$0")/.." && pwd)}
dir=${LMFUSE_README_CLONE:-$(mktemp -d /tmp/lmfuse-readme.XXXXXX)}
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$dir"' EXIT
git clone --quiet "$repo" "$dir/lmfuse"
cd "$dir/lmfuse"
echo "readme-check: fresh clone of $(git rev-parse --short HEAD) in $dir/lmfuse"

mapfile -t cmds < <(awk '/readme-check/ {armed=1; next} armed && /^```sh/ {inblk=1; next}
                         inblk && /^```/ {exit} inblk && NF {print}' README.md)
[ ${#cmds[@]} -ge 2 ] || { echo "readme-check: README.md has no command block after its readme-check marker" >&2; exit 1; }

log=$dir/commands.log
: >"$log"
i=0
for c in "${cmds[@]}"; do
  i=$((i + 1))
  echo "readme-check: command $i: $c"
  start=$(date +%s)
  set +e
  bash -c "set -o pipefail; $c" 2>&1 | tee -a "$log"
  rc=${PIPESTATUS[0]}
  set -e
  echo "readme-check: command $i exited $rc after $(( $(date +%s) - start )) s"
  [ "$rc" = 0 ] || { echo "readme-check: FAILED: command $i of README.md: $c" >&2; exit 1; }
done

# ctest lists the tests it did not run as "  N - name (Skipped)".
mapfile -t skipped < <(sed -n 's/^[[:space:]]*[0-9]* - \(.*\) (Skipped)$/\1/p' "$log")
bad=()
for t in "${skipped[@]}"; do
  [[ " ${ALLOWED_SKIPS:-} " == *" $t "* ]] || bad+=("$t")
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "readme-check: FAILED: skipped here though this machine can run them (not in ALLOWED_SKIPS): ${bad[*]}" >&2
  grep -h -A3 "SKIP" "$dir"/lmfuse/build/Testing/Temporary/LastTest.log 2>/dev/null | head -40 >&2 || true
  exit 1
fi
echo "readme-check: passed (${#skipped[@]} allowed skip(s)${skipped[*]:+: ${skipped[*]}})"
