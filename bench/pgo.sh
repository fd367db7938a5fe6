#!/usr/bin/env bash
# bench/pgo.sh: take default.pgo again, the CPU profile `go build` and
# `go install` optimise the binary by (profile-guided optimisation).
#
#   bench/pgo.sh [--out FILE]
#
# The profile is three profiles merged, one per hot path a user waits on:
#   - report's and check's read path over the realistic 1M-row log
#     (BenchmarkReadPath, on bench/genlog's log);
#   - simulate's million jobs on the virtual clock (BenchmarkSimulate1M,
#     the command as a user runs it);
#   - the proxy at concurrency 64 in front of an instant upstream
#     (BenchmarkAddedLatency, client, proxy and upstream in one process).
# Each is a CPU profile of its benchmark; `go tool pprof -proto` sums
# them. It takes a few minutes; see docs/dev/speed.md.
set -euo pipefail

out=default.pgo
while (($#)); do
	case $1 in
	--out) [[ $# -ge 2 ]] || { echo "pgo.sh: --out needs a file" >&2; exit 2; }; out=$2; shift ;;
	--out=*) out=${1#--out=} ;;
	-h | --help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "pgo.sh: unknown argument: $1 (see --help)" >&2; exit 2 ;;
	esac
	shift
done
[[ $out == /* ]] || out=$PWD/$out
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/retrygate-pgo.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
say() { printf '[%s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

say "generating the realistic 1M-row log"
go run ./bench/genlog -rows 1000000 -log "$tmp/rehearsal.log" >/dev/null
say "profile 1/3: report's and check's read path"
RETRYGATE_BENCH_LOG=$tmp/rehearsal.log go test ./ledgerfile/summary -run '^$' \
	-bench 'ReadPath/(report|check)' -benchtime 2x -cpuprofile "$tmp/read.pgo" -o "$tmp/summary.test" >/dev/null
say "profile 2/3: simulate, a million jobs"
go test ./cmd -run '^$' -bench 'Simulate1M' -benchtime 3x -cpu 1 -cpuprofile "$tmp/simulate.pgo" -o "$tmp/cmd.test" >/dev/null
say "profile 3/3: the proxy at c=64"
go test ./rehearse/proxy -run '^$' -bench 'AddedLatency/upstream=0/c=64$' -benchtime 20000x \
	-cpuprofile "$tmp/proxy.pgo" -o "$tmp/proxy.test" >/dev/null
go tool pprof -proto "$tmp/read.pgo" "$tmp/simulate.pgo" "$tmp/proxy.pgo" >"$out" 2>/dev/null
say "wrote $out ($(wc -c <"$out") bytes)"
