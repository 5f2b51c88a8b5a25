#!/usr/bin/env bash
# Harness overhead (runner step time / bare-loop step time) for every framework, train and infer.
# Each framework runs in its own virtual environment; FWBENCH_VENVS overrides where they live
# (default: .venvs at the repository root). Extra arguments go to every run, e.g. --repetitions 9.
# JSON results land in ${FWBENCH_RESULTS:-results}/overhead-<framework>-<mode>.json.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venvs="${FWBENCH_VENVS:-$root/.venvs}"
results="${FWBENCH_RESULTS:-$root/results}"
mkdir -p "$results"

summary=()
for framework in torch tensorflow; do
  python="$venvs/$framework/bin/python"
  if [[ ! -x "$python" ]]; then
    echo "skipping $framework: no $python" >&2
    continue
  fi
  for mode in train infer; do
    echo "== $framework $mode" >&2
    # Runs one at a time: two at once would share the CPU and spoil both.
    out="$("$python" "$root/benchmarks/harness_overhead.py" --framework "$framework" --mode "$mode" \
      --json "$results/overhead-$framework-$mode.json" "$@")"
    echo "$out"
    summary+=("$(tail -n 1 <<<"$out")")
  done
done

if (( ${#summary[@]} == 0 )); then
  echo "no framework environment found under $venvs" >&2
  exit 1
fi
echo
printf '%s\n' "${summary[@]}"
