#!/usr/bin/env bash
# bench/compare.sh: measure retrygate beside its peer tools, in one run,
# on this machine, and print issue 11's table as markdown.
#
#   bench/compare.sh [--quick] [--tests] [--only report|rehearse|proxy] [--out FILE] [--keep DIR]
#   bench/compare.sh --against REF [--quick] [--out FILE]
#
# See docs/dev/speed.md for what each figure means. Everything it starts
# listens on 127.0.0.1 only and is killed on exit; every loop is bounded.
set -euo pipefail

usage() {
	cat <<'EOF'
usage: bench/compare.sh [--quick] [--tests] [--only report|rehearse|proxy] [--out FILE] [--keep DIR]
       bench/compare.sh --against REF [--quick] [--out FILE]

Builds retrygate and a hello-world Go binary, installs the peers when
missing (vegeta v12.13.0 with go install into a cache directory; hyperfine,
curl, jq, GNU time and nginx-light with apt-get), generates a rehearsal.log and the
matching vegeta results, runs every figure of issue 11 side by side and
prints the table as markdown on stdout.

  --quick     shrink the sizes (100,000-row log, 2,000 attempts, fewer runs)
  --only report
              only the report and check rows (the log, the vegeta results,
              report, check and vegeta report)
  --tests     also time the whole test suite (go test -count=1 ./...; long)
  --only rehearse
              run only the rehearse-vs-vegeta rows (no log, no start-up,
              report, proxy or simulate rows); for profiling that figure
  --only proxy  only the proxy rows (retrygate proxy and nginx vs direct,
              c=64 and 1)
  --against REF
              an A/B of this tree against commit REF instead of the table:
              both built alike, then alternating pairs of start-up
              (--version, admit), simulate 1M --rate 20 on one core and
              report on a 1M-row log; prints both figures and their ratio
  --out FILE  also write the table to FILE
  --keep DIR  keep the generated log, results and raw measurements in DIR
  -h, --help  this text

Exit status: 0 when every step ran, non-zero when one failed (its output
is shown on stderr).
EOF
}

quick=0 tests=0 out="" keep="" only="" against=""
while (($#)); do
	case $1 in
	--quick) quick=1 ;;
	--tests) tests=1 ;;
	--out) [[ $# -ge 2 ]] || { echo "compare.sh: --out needs a file" >&2; exit 2; }; out=$2; shift ;;
	--out=*) out=${1#--out=} ;;
	--keep) [[ $# -ge 2 ]] || { echo "compare.sh: --keep needs a directory" >&2; exit 2; }; keep=$2; shift ;;
	--keep=*) keep=${1#--keep=} ;;
	--only) [[ $# -ge 2 ]] || { echo "compare.sh: --only needs a part (report, rehearse or proxy)" >&2; exit 2; }; only=$2; shift ;;
	--only=*) only=${1#--only=} ;;
	--against) [[ $# -ge 2 ]] || { echo "compare.sh: --against needs a commit" >&2; exit 2; }; against=$2; shift ;;
	--against=*) against=${1#--against=} ;;
	-h | --help) usage; exit 0 ;;
	*) echo "compare.sh: unknown argument: $1 (see --help)" >&2; exit 2 ;;
	esac
	shift
done
[[ -z $against || (-z $only && $tests == 0 && -z $keep) ]] ||
	{ echo "compare.sh: --against takes only --quick and --out" >&2; exit 2; }
case $only in
'' | report | rehearse | proxy) ;;
*) echo "compare.sh: --only: unknown part \"$only\" (report, rehearse or proxy)" >&2; exit 2 ;;
esac
# want PART: whether this run measures PART (every part, or the one --only names;
# the data, the log and vegeta's results, is made for report).
want() {
	[[ -z $only ]] && return 0
	[[ $1 == data ]] && { [[ $only == report ]]; return; }
	[[ $only == "$1" ]]
}
# Paths given relative to the caller's directory stay so after the cd below.
[[ -z $out || $out == /* ]] || out=$PWD/$out
[[ -z $keep || $keep == /* ]] || keep=$PWD/$keep

# Sizes. The full run matches issue 11: a 1,000,000-row log, 10,000
# rehearsed attempts at concurrency 64, 1,000,000 simulated jobs.
if ((quick)); then
	rows=100000 attempts=2000 vegeta_s=2 sim_jobs=100000 hf_runs=15 rss_runs=3 big_runs=1 time_calls=10
else
	rows=1000000 attempts=10000 vegeta_s=5 sim_jobs=1000000 hf_runs=40 rss_runs=5 big_runs=3 time_calls=30
fi
conc=64
vegeta_version=v12.13.0

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/retrygate-bench.XXXXXX")
pids=()

ab_tree=""
cleanup() {
	local rc=$? p
	for p in "${pids[@]}"; do
		kill "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	if [[ -n $ab_tree ]]; then
		git -C "$repo" worktree remove --force "$ab_tree" 2>/dev/null || true
		git -C "$repo" worktree prune 2>/dev/null || true
	fi
	if [[ -n $keep ]]; then
		mkdir -p "$keep" && cp -r "$tmp"/. "$keep"/ && echo "compare.sh: kept the data in $keep" >&2
	fi
	rm -rf "$tmp"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say() { printf '[%s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { echo "compare.sh: $*" >&2; exit 1; }

# run LABEL CMD...: run a step, its output kept in $tmp/logs; on failure
# show it and stop.
mkdir -p "$tmp/logs" "$tmp/m" "$tmp/work"
run() {
	local label=$1; shift
	if ! "$@" >"$tmp/logs/$label.out" 2>"$tmp/logs/$label.err"; then
		echo "compare.sh: step '$label' failed: $*" >&2
		tail -n 20 "$tmp/logs/$label.err" "$tmp/logs/$label.out" >&2
		exit 1
	fi
}

# ---------------------------------------------------------------- peers

command -v go >/dev/null || die "Go is needed to build retrygate (see go.mod for the version): https://go.dev/dl/"

as_root=()
if ((EUID != 0)); then
	command -v sudo >/dev/null && as_root=(sudo)
fi
need=()
command -v hyperfine >/dev/null || need+=(hyperfine)
command -v curl >/dev/null || need+=(curl)
command -v jq >/dev/null || need+=(jq)
[[ -x /usr/bin/time ]] || need+=(time)
command -v taskset >/dev/null || need+=(util-linux)
nginx=$(command -v nginx || echo /usr/sbin/nginx)
if [[ -z $against ]] && want proxy && [[ ! -x $nginx ]]; then need+=(nginx-light); fi
if ((${#need[@]})); then
	command -v apt-get >/dev/null || die "missing ${need[*]}, and no apt-get to install them with"
	say "installing ${need[*]} with apt-get"
	run apt-update "${as_root[@]}" apt-get update
	run apt-install env DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y "${need[@]}"
fi

# ---------------------------------------------------------------- --against REF

# An A/B of this tree against REF: both built alike (static, each with its
# own default.pgo), then run in alternating pairs, A then B, on the same
# inputs, so load that comes and goes falls on both alike. Start-up is
# user + system CPU and wall time per run (medians of the pairs); simulate
# is user + system CPU and max RSS (medians) of the issue's model on one
# core.
if [[ -n $against ]]; then
	command -v git >/dev/null || die "--against needs git"
	ref=$(git -C "$repo" rev-parse --verify --short "$against^{commit}" 2>/dev/null) ||
		die "--against: no commit \"$against\" in $repo"
	here=$(git -C "$repo" rev-parse --short HEAD)
	[[ -z $(git -C "$repo" status --porcelain --untracked-files=no) ]] || here="$here+changes"
	if ((quick)); then ab_pairs=10 ab_sim_pairs=3 ab_jobs=100000; else ab_pairs=30 ab_sim_pairs=5 ab_jobs=1000000; fi
	export CGO_ENABLED=0
	ab_tree=$tmp/ab-ref
	say "building $ref (a git worktree in $ab_tree) and this tree ($here)"
	run ab-worktree git -C "$repo" worktree add --detach "$ab_tree" "$ref"
	(cd "$ab_tree" && run ab-build-ref go build -o "$tmp/rg-ref" .)
	(cd "$repo" && run ab-build-here go build -o "$tmp/rg-here" .)
	# runone BIN ARGS...: one run's wall and user + system CPU in ms, from
	# the child's own rusage (GNU time counts CPU in 10 ms steps; a start
	# takes a few ms, and CPU is what load disturbs least).
	mkdir -p "$tmp/runone"
	cat >"$tmp/runone/main.go" <<'EOF'
package main

import (
	"fmt"
	"os"
	"os/exec"
	"time"
)

func main() {
	c := exec.Command(os.Args[1], os.Args[2:]...)
	start := time.Now()
	err := c.Run()
	wall := time.Since(start)
	if c.ProcessState == nil || c.ProcessState.ExitCode() > 1 { // admit exits 1 when it refuses
		fmt.Fprintln(os.Stderr, "runone:", os.Args[1:], err)
		os.Exit(2)
	}
	cpu := c.ProcessState.UserTime() + c.ProcessState.SystemTime()
	fmt.Printf("%.3f %.3f\n", float64(wall.Microseconds())/1000, float64(cpu.Microseconds())/1000)
}
EOF
	printf 'module runone\n\ngo 1.21\n' >"$tmp/runone/go.mod"
	(cd "$tmp/runone" && run ab-build-runone go build -o "$tmp/runone-bin" .)
	cd "$tmp/work"
	admit_args=(admit --deadline 45s --token-ceiling 8000 --max-attempts 2 --max-wait 5s --spent 7.2
		--spent-tokens 2100 --used 1 --next-wait 1.2 --next-elapsed 7.2 --next-tokens 2100)
	sim_args=(simulate --policy "$repo/testdata/models/two-attempts.yaml" --jobs "$ab_jobs" --rate 20
		--model 'lognormal p50=2.1s p99=14s hang=0.3% 429=1% 5xx=2% tokens=2100 prompt=1500')
	median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print 0; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
	abrow() { awk -v n="$1" -v a="$2" -v b="$3" -v f="$4" 'BEGIN { printf "| %s | " f " | " f " | %.3f× |\n", n, a, b, (a > 0 ? b / a : 0) }'; }
	: >"$tmp/m/ab.txt"
	for what in version admit; do
		say "start-up A/B: $what, $ab_pairs pairs"
		args=(--version)
		[[ $what == admit ]] && args=("${admit_args[@]}")
		for side in ref here; do run ab-warm "$tmp/runone-bin" "$tmp/rg-$side" "${args[@]}"; done # the page cache
		for ((i = 0; i < ab_pairs; i++)); do
			for side in ref here; do
				w=$("$tmp/runone-bin" "$tmp/rg-$side" "${args[@]}") || die "$what failed on $side"
				echo "$what $side $w" >>"$tmp/m/ab.txt"
			done
		done
	done
	say "report A/B: $ab_sim_pairs pairs of report on bench/genlog's $ab_jobs-row log"
	(cd "$repo" && run ab-genlog go run ./bench/genlog -rows "$ab_jobs" -log "$tmp/ab-report.log")
	for side in ref here; do run ab-warm-report "$tmp/rg-$side" report "$tmp/ab-report.log"; done # the page cache
	for ((i = 0; i < ab_sim_pairs; i++)); do
		for side in ref here; do
			/usr/bin/time -o "$tmp/m/ab-time" -f '%U %S %M' "$tmp/rg-$side" report "$tmp/ab-report.log" >/dev/null 2>"$tmp/logs/ab-report.err" ||
				{ cat "$tmp/logs/ab-report.err" >&2; die "report failed on $side"; }
			read -r u sy kb <"$tmp/m/ab-time"
			echo "report $side $(awk -v u="$u" -v s="$sy" 'BEGIN { print u + s }') $kb" >>"$tmp/m/ab.txt"
		done
	done
	say "simulate A/B: $ab_sim_pairs pairs of ${sim_args[*]:0:6} … on one core"
	for ((i = 0; i < ab_sim_pairs; i++)); do
		for side in ref here; do
			/usr/bin/time -o "$tmp/m/ab-time" -f '%U %S %M' taskset -c 0 "$tmp/rg-$side" "${sim_args[@]}" >/dev/null 2>"$tmp/logs/ab-sim.err" ||
				{ cat "$tmp/logs/ab-sim.err" >&2; die "simulate failed on $side"; }
			read -r u sy kb <"$tmp/m/ab-time"
			echo "sim $side $(awk -v u="$u" -v s="$sy" 'BEGIN { print u + s }') $kb" >>"$tmp/m/ab.txt"
		done
	done
	fig() { awk -v w="$1" -v s="$2" -v c="$3" '$1 == w && $2 == s { print $c }' "$tmp/m/ab.txt" | median; }
	{
		echo "A/B of $here against $ref, $(date -u +%Y-%m-%d), load $(cut -d' ' -f1-3 /proc/loadavg), alternating pairs"
		echo
		echo "| figure | $ref | $here | ratio |"
		echo "|---|---|---|---|"
		for what in version admit; do
			name='`--version`'
			[[ $what == admit ]] && name='`admit …`'
			abrow "$name, median CPU ms ($ab_pairs pairs)" "$(fig $what ref 4)" "$(fig $what here 4)" "%.2f"
			abrow "$name, median wall ms" "$(fig $what ref 3)" "$(fig $what here 3)" "%.2f"
		done
		abrow "simulate $ab_jobs jobs --rate 20, one core, median CPU-s ($ab_sim_pairs pairs)" "$(fig sim ref 3)" "$(fig sim here 3)" "%.2f"
		abrow "simulate, median max RSS MB" "$(fig sim ref 4 | awk '{ print $1 / 1024 }')" "$(fig sim here 4 | awk '{ print $1 / 1024 }')" "%.1f"
		abrow "report on a $ab_jobs-row log, median CPU-s ($ab_sim_pairs pairs)" "$(fig report ref 3)" "$(fig report here 3)" "%.2f"
		abrow "report, median max RSS MB" "$(fig report ref 4 | awk '{ print $1 / 1024 }')" "$(fig report here 4 | awk '{ print $1 / 1024 }')" "%.1f"
	} | tee "$tmp/m/ab.md"
	[[ -z $out ]] || cp "$tmp/m/ab.md" "$out"
	exit 0
fi

cache=${XDG_CACHE_HOME:-$HOME/.cache}/retrygate-bench
vegeta=$cache/vegeta-$vegeta_version/bin/vegeta
if [[ ! -x $vegeta ]]; then
	say "installing vegeta $vegeta_version with go install (into $cache)"
	mkdir -p "$cache"
	run vegeta-install env GOBIN="$(dirname "$vegeta")" \
		go install "github.com/tsenart/vegeta/v12@$vegeta_version"
fi

# ---------------------------------------------------------------- builds

say "building retrygate, a hello-world Go binary, and the floor binary"
# Static, as README's install line builds it (CGO_ENABLED=0): a dynamically
# linked binary spends about 0.5 ms more in the loader on every start.
export CGO_ENABLED=0
rg=$tmp/retrygate
(cd "$repo" && run build-retrygate go build -o "$rg" .)
genlog=$tmp/genlog
(cd "$repo" && run build-genlog go build -o "$genlog" ./bench/genlog)
# The floor: a binary that imports every package retrygate's own code
# imports (net/http, crypto/tls, PostgreSQL's driver, the table renderer,
# the tokenizer, YAML …) and does nothing. Its start-up is what linking
# those costs before a line of retrygate runs.
mkdir -p "$tmp/floor"
cp "$repo/go.mod" "$repo/go.sum" "$tmp/floor/"
sed -i 's|^module github.com/retrygate/retrygate$|module floor|' "$tmp/floor/go.mod"
{
	printf 'package main\n\nimport (\n'
	(cd "$repo" && go list -pgo=off -f '{{join .Imports "\n"}}' ./...) | sort -u |
		grep -v -e '^github.com/retrygate/retrygate' -e '^C$' -e '/internal/' -e '^internal/' -e '^vendor/' |
		sed 's/.*/\t_ "&"/'
	printf ')\n\nfunc main() { println("floor") }\n'
} >"$tmp/floor/main.go"
floor=$tmp/floor-bin
(cd "$tmp/floor" && run build-floor go build -mod=mod -o "$floor" .)
mkdir -p "$tmp/hello"
cat >"$tmp/hello/main.go" <<'EOF'
package main

import "fmt"

func main() { fmt.Println("hello, world") }
EOF
printf 'module hello\n\ngo 1.21\n' >"$tmp/hello/go.mod"
hello=$tmp/hello-world
(cd "$tmp/hello" && run build-hello go build -o "$hello" .)

load0=$(cut -d' ' -f1-3 /proc/loadavg)
commit=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)
if [[ -n $(git -C "$repo" status --porcelain --untracked-files=no 2>/dev/null) ]]; then
	commit="$commit (with uncommitted changes)"
fi

# Every retrygate command runs in an empty directory: no retrygate.yaml
# from the caller's directory changes what is measured.
cd "$tmp/work"

# ---------------------------------------------------------------- helpers

# num EXPR: awk arithmetic, printed as given by the format in $2.
calc() { awk "BEGIN { printf \"$1\", $2 }"; }
# ratio A B: "A÷B×", or — when B is 0.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 == 0) print "—"; else printf "%.1f×", a / b }'; }
# median of the numbers on stdin; pct P: nearest-rank percentile.
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print 0; else print v[int((NR + 1) / 2)] }'; }
pct() { sort -g | awk -v p="$1" '{ v[NR] = $1 } END { if (NR == 0) { print 0; exit } r = int(p / 100 * NR + 0.999999); if (r < 1) r = 1; print v[r] }'; }

# hf NAME RUNS [hyperfine options] -- COMMAND: time COMMAND (no shell)
# with hyperfine; sets hf_wall (median s) and hf_cpu (mean user+sys s).
hf() {
	local name=$1 runs=$2; shift 2
	local opts=()
	while [[ $1 != -- ]]; do opts+=("$1"); shift; done
	shift
	run "hf-$name" hyperfine -N --style none --warmup 3 --runs "$runs" "${opts[@]}" \
		--export-json "$tmp/m/$name.json" "$1"
	hf_wall=$(jq '.results[0].median' "$tmp/m/$name.json")
	hf_cpu=$(jq '.results[0].user + .results[0].system' "$tmp/m/$name.json")
}

# rss NAME RUNS CMD...: median max RSS in KiB over RUNS runs (GNU time).
# Exit status 0 or 1 (refuse) count as ran; 2 and up fail the step.
rss() {
	local name=$1 runs=$2 i rc; shift 2
	: >"$tmp/m/$name.rss"
	for ((i = 0; i < runs; i++)); do
		rc=0
		/usr/bin/time -f '%M' -o "$tmp/m/$name.time" "$@" >/dev/null 2>"$tmp/logs/rss-$name.err" || rc=$?
		if ((rc > 1)); then
			echo "compare.sh: step 'rss-$name' failed ($rc): $*" >&2
			tail -n 20 "$tmp/logs/rss-$name.err" >&2
			exit 1
		fi
		tail -n 1 "$tmp/m/$name.time" >>"$tmp/m/$name.rss"
	done
	rss_kib=$(median <"$tmp/m/$name.rss")
}
commas() { awk -v n="$1" 'BEGIN { s = sprintf("%d", n); while (s ~ /[0-9][0-9][0-9][0-9]/) sub(/[0-9][0-9][0-9]([,]|$)/, ",&", s); print s }'; }
mib() { calc '%.0f' "$1 / 1024"; }
ms() { calc '%.1f' "$1 * 1000"; }

# serve NAME SCRIPT: start `retrygate seat serve` on 127.0.0.1 with SCRIPT;
# sets url and srv_pid.
serve() {
	local name=$1 script=$2 i
	"$rg" seat serve --script "$script" --addr 127.0.0.1:0 >"$tmp/logs/serve-$name.out" 2>"$tmp/logs/serve-$name.err" &
	srv_pid=$!
	pids+=("$srv_pid")
	url=
	for ((i = 0; i < 100; i++)); do
		url=$(head -n 1 "$tmp/logs/serve-$name.out" 2>/dev/null || true)
		[[ $url == http://127.0.0.1:* ]] && return 0
		kill -0 "$srv_pid" 2>/dev/null || break
		sleep 0.1
	done
	cat "$tmp/logs/serve-$name.err" >&2
	die "seat serve ($name) did not print its URL within 10 s"
}
stop() { # PID: stop a server this script started, and forget it
	local p keep_pids=()
	kill "$1" 2>/dev/null || true
	wait "$1" 2>/dev/null || true
	for p in "${pids[@]}"; do [[ $p == "$1" ]] || keep_pids+=("$p"); done
	pids=("${keep_pids[@]}")
}

rows_out=()
row() { rows_out+=("| $1 | $2 | $3 | $4 |"); }
# The request every client sends: a streaming chat completion.
body='{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true},"max_tokens":256,"messages":[{"role":"user","content":"Say hi."}]}'
printf '%s\n' "$body" >"$tmp/body.json"

# table: print the rows gathered as markdown (and to --out).
table() {
	model_name=$(grep -m 1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//' || true)
	{
		echo "Measured $(date -u +%Y-%m-%d) on $(nproc) cores (${model_name:-unknown CPU}), commit $commit, with bench/compare.sh$( ((quick)) && echo ' --quick')$([[ -n $only ]] && echo " --only $only")."
		echo "Load average before the run: $load0 (other work on the machine widens wall times; CPU times are steadier)."
		echo "Peers: vegeta $vegeta_version, $(hyperfine --version), $(curl --version | head -n 1 | cut -d' ' -f1-2), $(go version | cut -d' ' -f3)."
		echo
		echo "| figure | retrygate | peer, same run | ratio |"
		echo "|---|---|---|---|"
		printf '%s\n' "${rows_out[@]}"
	} >"$tmp/table.md"
	cat "$tmp/table.md"
	if [[ -n $out ]]; then
		cp "$tmp/table.md" "$out"
	fi
}

# ---------------------------------------------------------------- proxy vs direct

# The same vegeta attack (keep-alive, the streaming body) straight at
# `seat serve` and through `retrygate proxy` in front of it, at
# concurrency 64 and 1. The seat answers at 20 ms, as the fastest model
# does: an instant one would measure three HTTP stacks sharing these
# cores, not what an application sees. (Defined here; run in its turn
# below, or alone with --only proxy.) vattack is every vegeta attack of
# this script: the streaming body at URL, and what vegeta's report says.
vattack() { # NAME URL WORKERS SECONDS KEEPALIVE: sets va_n va_rate va_cpu1k va_p50 va_p95
	local name=$1 wall u s
	printf 'POST %s/chat/completions\nContent-Type: application/json\n@%s\n' "$2" "$tmp/body.json" >"$tmp/targets-$name.txt"
	run "$name" /usr/bin/time -f '%e %U %S %M' -o "$tmp/m/$name.time" \
		timeout $(($4 + 60)) "$vegeta" attack -targets "$tmp/targets-$name.txt" -rate 0 \
		-workers "$3" -max-workers "$3" -duration "${4}s" -keepalive="$5" -output "$tmp/$name.bin"
	run "$name-report" "$vegeta" report -type json "$tmp/$name.bin"
	jq -e '.success == 1' "$tmp/logs/$name-report.out" >/dev/null || say "warning: vegeta ($name) saw errors: $(jq -c '.errors' "$tmp/logs/$name-report.out")"
	va_n=$(jq '.requests' "$tmp/logs/$name-report.out")
	read -r wall u s _ <"$tmp/m/$name.time"
	va_rate=$(calc '%.0f' "$va_n / $wall")
	va_cpu1k=$(calc '%.3f' "($u + $s) / $va_n * 1000")
	va_p50=$(jq '.latencies["50th"] / 1e9' "$tmp/logs/$name-report.out")
	va_p95=$(jq '.latencies["95th"] / 1e9' "$tmp/logs/$name-report.out")
}
# nginx_attack: the same attack through nginx in front of the seat at
# $url, as a reverse proxy is set up for streaming (proxy_pass with an
# upstream keep-alive pool, proxy_buffering off), in one process
# (master_process off: its CPU is one /proc entry; the proxy runs on one
# CPU too, see SidecarProcs), on a free port below the ephemeral range.
nginx_attack() { # WORKERS SECONDS: sets ng_rate ng_p50 ng_p95 ng_cpu_us, from vattack
	local c=$1 secs=$2 hostport path port ng_pid ng_url cpu0 cpu1 i
	hostport=${url#http://} && hostport=${hostport%%/*}
	path=/${url#http://*/}
	mkdir -p "$tmp/nginx"
	for ((port = 21400; port < 21500; port++)); do
		cat >"$tmp/nginx/nginx.conf" <<EOF
daemon off;
master_process off;
worker_processes 1;
pid $tmp/nginx/nginx.pid;
error_log $tmp/logs/nginx-error.log warn;
events { worker_connections 4096; }
http {
	access_log off;
	client_body_temp_path $tmp/nginx/body;
	proxy_temp_path $tmp/nginx/proxy;
	upstream seat { server $hostport; keepalive 256; }
	server {
		listen 127.0.0.1:$port;
		location / {
			proxy_pass http://seat;
			proxy_http_version 1.1;
			proxy_set_header Connection "";
			proxy_buffering off;
		}
	}
}
EOF
		"$nginx" -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf" >"$tmp/logs/nginx.out" 2>"$tmp/logs/nginx.err" &
		ng_pid=$!
		pids+=("$ng_pid")
		ng_url=
		for ((i = 0; i < 50; i++)); do
			kill -0 "$ng_pid" 2>/dev/null || break
			if curl -s -o /dev/null "http://127.0.0.1:$port/"; then ng_url=http://127.0.0.1:$port$path && break; fi
			sleep 0.1
		done
		[[ -n $ng_url ]] && break
		stop "$ng_pid" # the port was taken: the next one
	done
	[[ -n $ng_url ]] || { cat "$tmp/logs/nginx.err" >&2; die "nginx did not start"; }
	cpu0=$(awk '{ print $14 + $15 }' "/proc/$ng_pid/stat")
	vattack "nginx-c$c" "$ng_url" "$c" "$secs" true
	cpu1=$(awk '{ print $14 + $15 }' "/proc/$ng_pid/stat")
	stop "$ng_pid"
	ng_rate=$va_rate ng_p50=$va_p50 ng_p95=$va_p95
	ng_cpu_us=$(calc '%.0f' "($cpu1 - $cpu0) / $(getconf CLK_TCK) / $va_n * 1000000")
}
proxy_pair() { # WORKERS SECONDS: one direct, one proxied and one nginx attack, on a fresh seat
	# and proxy; sets pr_added (ms), pr_cells and ng_cells (the rows' cells but their first)
	local c=$1 secs=$2 i px_pid px_url cpu0 cpu1 logged px_cpu1k px_cpu_us di_rate di_p50 di_p95
	cat >"$tmp/model-seat.yaml" <<'EOF'
name: model
model: gpt-4o-mini
then: loop
steps:
  - {ttfb: 20ms, wait: 20ms, elapsed: 20ms, prompt_tokens: 20, completion_tokens: 10}
EOF
	serve "model-c$c" "$tmp/model-seat.yaml"
	vattack "direct-c$c" "$url" "$c" "$secs" true
	di_rate=$va_rate di_p50=$va_p50 di_p95=$va_p95
	cat >"$tmp/proxied.yaml" <<EOF
budget: {deadline: 30s, max_attempts: 3}
timeouts: {hard: 10s}
seats:
  served: {kind: openai, base_url: $url, model: gpt-4o-mini}
fallback: [served]
EOF
	rm -f "$tmp/proxy.log"
	"$rg" --config "$tmp/proxied.yaml" proxy --listen 127.0.0.1:0 --log "$tmp/proxy.log" \
		>"$tmp/logs/proxy.out" 2>"$tmp/logs/proxy.err" &
	px_pid=$!
	pids+=("$px_pid")
	px_url=
	for ((i = 0; i < 100; i++)); do
		px_url=$(head -n 1 "$tmp/logs/proxy.out" 2>/dev/null || true)
		[[ $px_url == http://127.0.0.1:* ]] && break
		kill -0 "$px_pid" 2>/dev/null || break
		sleep 0.1
	done
	[[ $px_url == http://127.0.0.1:* ]] || { cat "$tmp/logs/proxy.err" >&2; die "retrygate proxy printed no URL"; }
	cpu0=$(awk '{ print $14 + $15 }' "/proc/$px_pid/stat")
	vattack "proxied-c$c" "$px_url" "$c" "$secs" true
	cpu1=$(awk '{ print $14 + $15 }' "/proc/$px_pid/stat")
	stop "$px_pid" # SIGTERM: the proxy drains and writes every row
	logged=$(grep -c '^ts=' "$tmp/proxy.log" || true)
	[[ $logged == "$va_n" ]] || say "warning: proxy: $logged rows for $va_n requests"
	px_cpu1k=$(calc '%.3f' "($cpu1 - $cpu0) / $(getconf CLK_TCK) / $va_n * 1000")
	px_cpu_us=$(calc '%.0f' "($cpu1 - $cpu0) / $(getconf CLK_TCK) / $va_n * 1000000")
	pr_added=$(calc '%.2f' "($va_p50 - $di_p50) * 1000")
	local px_rate=$va_rate px_p50=$va_p50 px_p95=$va_p95 ng_added
	nginx_attack "$c" "$secs"
	stop "$srv_pid"
	ng_added=$(calc '%.2f' "($ng_p50 - $di_p50) * 1000")
	pr_cells=("$(commas "$px_rate")/s, p50 / p95 $(ms "$px_p50") / $(ms "$px_p95") ms; the proxy: $px_cpu1k CPU-s per 1,000 ($px_cpu_us µs a request), a row each"
		"direct: $(commas "$di_rate")/s, p50 / p95 $(ms "$di_p50") / $(ms "$di_p95") ms"
		"$(ratio "$px_rate" "$di_rate") rate; p50 $(calc '%+.1f' "$pr_added") ms, p95 $(calc '%+.1f' "($px_p95 - $di_p95) * 1000") ms; added p50 $(calc '%.1f' "$pr_added / ($ng_added > 0.05 ? $ng_added : 0.05)")× nginx's")
	ng_cells=("nginx: $(commas "$ng_rate")/s, p50 / p95 $(ms "$ng_p50") / $(ms "$ng_p95") ms; $ng_cpu_us µs of CPU a request"
		"direct: $(commas "$di_rate")/s, p50 / p95 $(ms "$di_p50") / $(ms "$di_p95") ms"
		"$(ratio "$ng_rate" "$di_rate") rate; p50 $(calc '%+.1f' "$ng_added") ms, p95 $(calc '%+.1f' "($ng_p95 - $di_p95) * 1000") ms")
}
proxy_row() { # WORKERS SECONDS PAIRS: one row, from the pair with the median added p50 of PAIRS
	local c=$1 secs=$2 pairs=$3 k med note=""
	local -a all=() cells=() ngs=()
	for ((k = 0; k < pairs; k++)); do
		proxy_pair "$c" "$secs"
		all+=("$pr_added")
		cells+=("${pr_cells[@]}")
		ngs+=("${ng_cells[@]}")
	done
	# The run-to-run spread at concurrency 64 is as large as the figure:
	# the median pair gives the row, and every pair's added p50 is shown.
	local goal="goal: ≥ 0.8× direct, added p50 ≤ 2.5× nginx's, ≤ 200 µs of CPU a request"
	((c == 1)) && goal="goal: ≤ +0.5 ms added at p50"
	med=$(for k in "${!all[@]}"; do echo "${all[$k]} $k"; done | sort -n | awk -v n="$pairs" 'NR == int((n + 1) / 2) { print $2 }')
	if ((pairs > 1)); then
		note="; the median of $pairs pairs, whose added p50 were $(printf '%s\n' "${all[@]}" | sort -n | awk '{ printf "%s%+.1f", (NR > 1 ? ", " : ""), $1 }') ms"
	fi
	row "\`proxy\` in front of \`seat serve\` answering at 20 ms: vegeta keep-alive, concurrency $c, ${secs}s" \
		"${cells[$((3 * med))]}" "${cells[$((3 * med + 1))]}" \
		"${cells[$((3 * med + 2))]}$note ($goal)"
	row "nginx-light (\`proxy_pass\`, upstream keep-alive, \`proxy_buffering off\`, one process) in front of the same seat, in the same pair: concurrency $c, ${secs}s" \
		"${ngs[$((3 * med))]}" "${ngs[$((3 * med + 1))]}" "${ngs[$((3 * med + 2))]}"
}
proxy_rows() {
	say "proxy and nginx vs direct: vegeta keep-alive, concurrency $conc for ${vegeta_s}s (three pairs) and 1 for $((2 * vegeta_s))s, a seat answering at 20 ms"
	proxy_row "$conc" "$vegeta_s" 3
	proxy_row 1 $((2 * vegeta_s)) 1 # about 45 requests a second: longer, for enough of them
}

# Each part below runs in a full run; --only runs one (want, above).
if want data; then

# ---------------------------------------------------------------- data

# The realistic log (issue 28): bench/genlog draws production-like
# traffic from a fixed seed: lognormal latencies at millisecond
# resolution (ok attempts' elapsed p50 about 2 s, p99 about 14 s; the
# first token independent of the answer's length), three seats and
# models, 5% 503s, 3% 429s, 1% timeouts and a 0.9 s wait cap that cuts
# slow first tokens, retried up to four attempts: about 1.4 rows a job,
# and some 20,000 distinct elapsed values. vegeta's results are the same
# rows' latencies (elapsed) and status codes, encoded to vegeta's gob
# format with `vegeta encode`.
say "generating a $rows-row realistic rehearsal.log and the same latencies as vegeta results (bench/genlog)"
biglog=$tmp/rehearsal.log
run gen-log "$genlog" -rows "$rows" -log "$biglog" -results "$tmp/results.json"
run vegeta-encode "$vegeta" encode --to gob --output "$tmp/results.gob" "$tmp/results.json"
rm -f "$tmp/results.json"
got=$(grep -c '^ts=' "$biglog" || true)
[[ $got == "$rows" ]] || die "the generated log has $got rows, not $rows"
log_mb=$(calc '%.0f' "$(stat -c %s "$biglog") / 1000000")
log_jobs=$(grep -c ' job_end=' "$biglog" || true)
first_job=$(grep -m 1 '^ts=' "$biglog" | grep -o ' job=[^ ]*' | cut -d= -f2)
last_job=$(tail -n 1 "$biglog" | grep -o ' job=[^ ]*' | cut -d= -f2)

# The second log, as earlier runs measured it (about 100 distinct
# latencies): retrygate itself writes it, rehearsing a script seat
# on the virtual clock. The script is 100 steps with varied timings and
# tokens, one of them a 503 that the next step retries: 99 jobs make 100
# rows, so rows × 99/100 jobs make exactly `rows` rows.
say "generating a $rows-row replayed rehearsal.log with retrygate rehearse (virtual clock)"
awk 'BEGIN {
	print "name: bench\nmodel: bench-mini\nthen: loop\nsteps:"
	for (i = 0; i < 100; i++) {
		if (i == 50) { print "  - {status: 503, elapsed: 0.2s}"; continue }
		t = 0.1 + (i * 37 % 50) / 100; w = t + (i * 53 % 80) / 100; e = w + 0.5 + (i * 71 % 300) / 100
		printf "  - {ttfb: %.2fs, wait: %.2fs, elapsed: %.2fs, prompt_tokens: %d, completion_tokens: %d}\n", t, w, e, 1000 + i * 97 % 1000, 100 + i * 59 % 600
	}
}' >"$tmp/bench-seat.yaml"
cat >"$tmp/gen.yaml" <<EOF
seats:
  s: {kind: script, script: $tmp/bench-seat.yaml}
fallback: [s]
EOF
scriptlog=$tmp/replayed.log
run gen-script-log "$rg" --config "$tmp/gen.yaml" rehearse --jobs $((rows / 100 * 99)) --log "$scriptlog" --json
got=$(grep -c '^ts=' "$scriptlog" || true)
[[ $got == "$rows" ]] || die "the replayed log has $got rows, not $rows"
script_mb=$(calc '%.0f' "$(stat -c %s "$scriptlog") / 1000000")

# vegeta's side of the replayed log: the same number of results, synthesised (not attacked:
# a million real requests would take minutes) as vegeta's JSON results
# with latencies spread like the log's, then encoded to vegeta's own gob
# format with `vegeta encode`.
say "synthesising $rows vegeta results for the replayed log (awk + vegeta encode)"
awk -v n="$rows" 'BEGIN {
	for (k = 0; k < n; k++) {
		i = k % 100
		code = (i == 50) ? 503 : 200
		lat = int((0.6 + (i * 53 % 80) / 100 + (i * 71 % 300) / 100) * 1e9)
		# one result a millisecond from 2026-11-30T00:00:00Z (awk without strftime)
		ms = k % 1000; sec = int(k / 1000)
		ts = sprintf("2026-11-30T%02d:%02d:%02d", int(sec / 3600) % 24, int(sec / 60) % 60, sec % 60)
		ns = ms * 1000000
		printf "{\"attack\":\"\",\"seq\":%d,\"code\":%d,\"timestamp\":\"%s.%09dZ\",\"latency\":%d,\"bytes_out\":144,\"bytes_in\":1050,\"error\":\"%s\",\"body\":null,\"method\":\"POST\",\"url\":\"http://127.0.0.1:6556/v1/chat/completions\",\"headers\":null}\n", k, code, ts, ns, lat, (code == 200 ? "" : "503 Service Unavailable")
	}
}' >"$tmp/results-replayed.json"
run vegeta-encode-replayed "$vegeta" encode --to gob --output "$tmp/results-replayed.gob" "$tmp/results-replayed.json"
rm -f "$tmp/results-replayed.json"

fi # data

# ---------------------------------------------------------------- start-up

if want startup; then

say "start-up: admit, record, claim, --version vs hello-world (hyperfine, $hf_runs runs)"
hf hello "$hf_runs" -- "$hello"
h_wall=$hf_wall h_cpu=$hf_cpu
rss hello "$rss_runs" "$hello"
h_rss=$rss_kib
hello_txt="hello-world Go binary: $(ms "$h_wall") ms wall, $(ms "$h_cpu") ms CPU, $(mib "$h_rss") MiB"

startup() { # LABEL NAME CMD (a hyperfine command line) [hyperfine options]
	local label=$1 name=$2 cmd=$3; shift 3
	hf "$name" "$hf_runs" "$@" -- "$cmd"
	# shellcheck disable=SC2086 # the command line is split like hyperfine -N splits it
	rss "$name" "$rss_runs" $cmd
	row "$label start to answer" \
		"$(ms "$hf_wall") ms wall, $(ms "$hf_cpu") ms CPU, $(mib "$rss_kib") MiB" \
		"$hello_txt" \
		"$(ratio "$hf_wall" "$h_wall") wall, $(ratio "$hf_cpu" "$h_cpu") CPU, $(ratio "$rss_kib" "$h_rss") RSS"
}
hf floor "$hf_runs" -- "$floor"
rss floor "$rss_runs" "$floor"
row "a binary that links retrygate's dependencies and does nothing (the floor)" \
	"$(ms "$hf_wall") ms wall, $(ms "$hf_cpu") ms CPU, $(mib "$rss_kib") MiB" \
	"$hello_txt" \
	"$(ratio "$hf_wall" "$h_wall") wall, $(ratio "$hf_cpu" "$h_cpu") CPU, $(ratio "$rss_kib" "$h_rss") RSS"
startup '`admit …` (flags)' admit "$rg admit --deadline 45s --token-ceiling 8000 --max-attempts 2 --max-wait 5s --spent 7.2 --spent-tokens 2100 --used 1 --next-wait 1.2 --next-elapsed 7.2 --next-tokens 2100"
startup '`record` (empty log)' record "$rg record --log $tmp/work/record.log --job j1 --seat s --wait 0.5 --elapsed 1.2 --tokens 1500" \
	--prepare "rm -f $tmp/work/record.log"
rm -f "$tmp/work/record.log"
startup '`claim`' claim "$rg claim --job j1 --state $tmp/work/claims.json" --prepare "rm -f $tmp/work/claims.json"
startup '`--version`' version "$rg --version"

# ---------------------------------------------------------------- time vs curl

# A seat with a 10 ms plan (headers at 2 ms, first content at 5 ms, last
# byte at 10 ms): what each client measures beyond 10 ms is its own error.
say "time --seat vs curl, $time_calls calls each, against seat serve"
cat >"$tmp/timed-seat.yaml" <<'EOF'
name: timed
model: gpt-4o-mini
then: loop
steps:
  - {ttfb: 2ms, wait: 5ms, elapsed: 10ms, prompt_tokens: 20, completion_tokens: 10}
EOF
serve timed "$tmp/timed-seat.yaml"
cat >"$tmp/served.yaml" <<EOF
seats:
  served: {kind: openai, base_url: $url, model: gpt-4o-mini}
fallback: [served]
EOF
: >"$tmp/m/time.el"; : >"$tmp/m/time.ttfb"; : >"$tmp/m/curl.el"; : >"$tmp/m/curl.ttfb"
for ((i = 0; i < time_calls; i++)); do
	run time-call timeout 30 "$rg" --config "$tmp/served.yaml" time --seat served --hard-timeout 10s --json
	jq -e '.outcome == "ok"' "$tmp/logs/time-call.out" >/dev/null || die "time --seat served did not return ok: $(cat "$tmp/logs/time-call.out")"
	jq '.elapsed_s' "$tmp/logs/time-call.out" >>"$tmp/m/time.el"
	jq '.ttfb_s' "$tmp/logs/time-call.out" >>"$tmp/m/time.ttfb"
	run curl-call timeout 30 curl -sS --max-time 10 -o /dev/null -w '%{time_total} %{time_starttransfer}\n' \
		-H 'Content-Type: application/json' --data-binary "@$tmp/body.json" "$url/chat/completions"
	read -r el tt <"$tmp/logs/curl-call.out"
	echo "$el" >>"$tmp/m/curl.el"
	echo "$tt" >>"$tmp/m/curl.ttfb"
done
# The whole process, start-up included, with hyperfine.
hf time-proc "$time_calls" -- "$rg --config $tmp/served.yaml time --seat served --hard-timeout 10s --json"
t_wall=$hf_wall t_cpu=$hf_cpu
hf curl-proc "$time_calls" -- "curl -sS --max-time 10 -o /dev/null -H 'Content-Type: application/json' --data-binary @$tmp/body.json $url/chat/completions"
c_wall=$hf_wall c_cpu=$hf_cpu
stop "$srv_pid"
t_el=$(median <"$tmp/m/time.el") t_tt=$(median <"$tmp/m/time.ttfb")
c_el=$(median <"$tmp/m/curl.el") c_tt=$(median <"$tmp/m/curl.ttfb")
row "\`time --seat S\`, a gpt-4o-mini seat on \`seat serve\` planning headers at 2 ms, last byte at 10 ms (p50 of $time_calls)" \
	"elapsed_s $(ms "$t_el") ms, ttfb_s $(ms "$t_tt") ms (ms resolution); whole process $(ms "$t_wall") ms wall, $(ms "$t_cpu") ms CPU" \
	"curl: time_total $(ms "$c_el") ms, time_starttransfer $(ms "$c_tt") ms; whole process $(ms "$c_wall") ms wall, $(ms "$c_cpu") ms CPU" \
	"elapsed $(calc '%+.1f' "($t_el - $c_el) * 1000") ms; process $(ratio "$t_wall" "$c_wall") wall, $(ratio "$t_cpu" "$c_cpu") CPU"

fi # startup

# ---------------------------------------------------------------- report, check

if want report; then

# report_rows LOG GOB LABEL: report and check on LOG beside vegeta report
# on GOB, the same latencies.
report_rows() {
	local log=$1 gob=$2 label=$3 r_wall r_cpu r_rss v_wall v_cpu v_rss vrep_txt k_wall k_cpu
	say "report and check on the $label vs vegeta report on $(commas "$rows") results ($big_runs runs each)"
	hf report "$big_runs" -- "$rg report $log"
	r_wall=$hf_wall r_cpu=$hf_cpu
	rss report 1 "$rg" report "$log"
	r_rss=$rss_kib
	hf vreport "$big_runs" -- "$vegeta report $gob"
	v_wall=$hf_wall v_cpu=$hf_cpu
	rss vreport 1 "$vegeta" report "$gob"
	v_rss=$rss_kib
	vrep_txt="\`vegeta report\` on $(commas "$rows") results: $(calc '%.2f' "$v_wall") s, $(calc '%.2f' "$v_cpu") CPU-s, $(mib "$v_rss") MiB"
	row "\`report\` on the $label" \
		"$(calc '%.2f' "$r_wall") s, $(calc '%.2f' "$r_cpu") CPU-s, $(mib "$r_rss") MiB" "$vrep_txt" \
		"$(ratio "$r_wall" "$v_wall") wall, $(ratio "$r_rss" "$v_rss") memory (goal: ≤ 1.0× wall, ≤ 100 MiB)"
	hf check "$big_runs" -- "$rg check --policy $tmp/policy.yaml $log"
	k_wall=$hf_wall k_cpu=$hf_cpu
	rss check 1 "$rg" check --policy "$tmp/policy.yaml" "$log"
	row "\`check\` on the same log" \
		"$(calc '%.2f' "$k_wall") s, $(calc '%.2f' "$k_cpu") CPU-s, $(mib "$rss_kib") MiB" "$vrep_txt" \
		"$(ratio "$k_wall" "$v_wall") wall, $(ratio "$rss_kib" "$v_rss") memory (goal: ≤ 1.0× wall, ≤ 100 MiB)"
}
cat >"$tmp/policy.yaml" <<'EOF'
budget: {deadline: 45s, token_ceiling: 8000, max_attempts: 2, max_wait: 5s}
thresholds:
  wait_s: ["p(95) < 5s"]
  attempts_per_success: ["< 1.5"]
  unknown_rate: ["count == 0"]
EOF
report_rows "$biglog" "$tmp/results.gob" "realistic $(commas "$rows")-row, $log_mb MB log ($(commas "$log_jobs") jobs; bench/genlog)"
report_rows "$scriptlog" "$tmp/results-replayed.gob" "replayed $(commas "$rows")-row, $script_mb MB log (a 100-step script; about 100 distinct latencies)"

fi # report

if want bigjob; then
# ---------------------------------------------------------------- record, admit --log on the big log

say "admit --log and record on the $(commas "$rows")-row log (last job $last_job, first job $first_job)"
bigjob() { # LABEL NAME CMD-FOR-JOB(with JOB)
	local label=$1 name=$2 cmd=$3 j txt=""
	for j in "$last_job" "$first_job"; do
		local c=${cmd//JOB/$j}
		hf "$name-$j" 10 -i -- "$c"
		# shellcheck disable=SC2086
		rss "$name-$j" 1 $c
		if [[ $j == "$last_job" ]]; then
			txt="last job: $(ms "$hf_wall") ms, $(mib "$rss_kib") MiB"
		else
			txt="$txt; first job: $(ms "$hf_wall") ms, $(mib "$rss_kib") MiB"
		fi
	done
	row "$label on the $(commas "$rows")-row log" "$txt" "—" "goal: < 50 ms near the end, < 0.5 s any job, ≤ 50 MB"
}
# admit first: record below adds rows to both jobs.
bigjob '`admit --log`' admitlog "$rg admit --log $biglog --job JOB"
bigjob '`record`' recordlog "$rg record --log $biglog --job JOB --seat s --wait 0.5 --elapsed 1.2 --tokens 1500"

fi # bigjob

# ---------------------------------------------------------------- rehearse vs vegeta attack

if want rehearse; then

say "rehearse $attempts attempts at concurrency $conc vs vegeta attack (${vegeta_s}s, keep-alive and not)"
cat >"$tmp/instant-seat.yaml" <<'EOF'
name: instant
model: gpt-4o-mini
then: loop
steps:
  - {ttfb: 0s, wait: 0s, elapsed: 0s, prompt_tokens: 20, completion_tokens: 10}
EOF

attack() { # NAME KEEPALIVE: vegeta against a fresh instant seat; sets va_rate va_cpu1k va_p50 va_p95
	serve "$1" "$tmp/instant-seat.yaml"
	vattack "$1" "$url" "$conc" "$vegeta_s" "$2"
	stop "$srv_pid"
}
attack vegeta-ka true
ka_rate=$va_rate ka_cpu1k=$va_cpu1k ka_p50=$va_p50 ka_p95=$va_p95
attack vegeta-cold false
co_rate=$va_rate co_cpu1k=$va_cpu1k co_p50=$va_p50 co_p95=$va_p95

serve rehearse "$tmp/instant-seat.yaml"
cat >"$tmp/served.yaml" <<EOF
seats:
  served: {kind: openai, base_url: $url, model: gpt-4o-mini}
fallback: [served]
EOF
run rehearse /usr/bin/time -f '%e %U %S %M' -o "$tmp/m/rehearse.time" \
	timeout 300 "$rg" --config "$tmp/served.yaml" rehearse --seat served --jobs "$attempts" \
	--concurrency "$conc" --log "$tmp/rehearse.log" --json
stop "$srv_pid"
read -r wall u s _ <"$tmp/m/rehearse.time"
n=$(grep -c '^ts=' "$tmp/rehearse.log" || true)
ok=$(grep -c ' outcome=ok ' "$tmp/rehearse.log" || true)
[[ $ok == "$n" ]] || say "warning: rehearse: $((n - ok)) of $n attempts were not ok"
re_rate=$(calc '%.0f' "$n / $wall")
re_cpu1k=$(calc '%.3f' "($u + $s) / $n * 1000")
grep -o ' elapsed_s=[0-9.]*' "$tmp/rehearse.log" | cut -d= -f2 >"$tmp/m/rehearse.el"
re_p50=$(pct 50 <"$tmp/m/rehearse.el") re_p95=$(pct 95 <"$tmp/m/rehearse.el")

row "\`rehearse\`, $(commas "$n") attempts, concurrency $conc, instant \`seat serve\`" \
	"$(commas "$re_rate") attempts/s, $re_cpu1k CPU-s per 1,000" \
	"vegeta, keep-alive: $(commas "$ka_rate")/s, $ka_cpu1k CPU-s per 1,000; without: $(commas "$co_rate")/s, $co_cpu1k CPU-s per 1,000" \
	"$(ratio "$re_rate" "$ka_rate") / $(ratio "$re_rate" "$co_rate") rate; $(ratio "$re_cpu1k" "$ka_cpu1k") / $(ratio "$re_cpu1k" "$co_cpu1k") CPU (vs keep-alive / without)"
row "elapsed p50 / p95 the client adds at c=$conc (the seat plans 0 ms)" \
	"$(ms "$re_p50") / $(ms "$re_p95") ms" \
	"vegeta, keep-alive: $(ms "$ka_p50") / $(ms "$ka_p95") ms; without: $(ms "$co_p50") / $(ms "$co_p95") ms" \
	"p50 $(calc '%+.1f' "($re_p50 - $ka_p50) * 1000") / $(calc '%+.1f' "($re_p50 - $co_p50) * 1000") ms"

fi # rehearse

# ---------------------------------------------------------------- proxy vs direct

want proxy && proxy_rows

# ---------------------------------------------------------------- simulate

if want simulate; then

say "simulate $sim_jobs jobs on one core, one after another and with --rate 20"
model='lognormal p50=2.1s p99=14s hang=0.3% 429=1% 5xx=2% tokens=2100'
for how in sequential rate; do
	extra=()
	[[ $how == rate ]] && extra=(--rate 20)
	run "simulate-$how" /usr/bin/time -f '%e %U %S %M' -o "$tmp/m/simulate-$how.time" \
		taskset -c 0 timeout 300 "$rg" simulate --jobs "$sim_jobs" "${extra[@]}" --model "$model"
	read -r wall u s m <"$tmp/m/simulate-$how.time"
	if [[ $how == rate ]]; then label="Poisson arrivals, --rate 20"; else label="jobs one after another"; fi
	row "\`simulate\` $(commas "$sim_jobs") jobs, one core (\`taskset -c 0\`), $label" \
		"$(calc '%.2f' "$u + $s") CPU-s ($(calc '%.2f' "$wall") s wall), $(mib "$m") MiB" "—" \
		"goal: 1 CPU-s for 1,000,000 jobs"
done
row "the \`simulate\` model" "\`$model\`" "—" "—"

fi # simulate

# ---------------------------------------------------------------- tests

rc=0
if ((tests)); then
	say "the test suite: go test -count=1 ./... (long)"
	t0=$(date +%s)
	if (cd "$repo" && timeout 3600 go test -count=1 ./... >"$tmp/logs/tests.out" 2>&1); then
		verdict=passed
	else
		verdict=FAILED rc=1
		tail -n 30 "$tmp/logs/tests.out" >&2
	fi
	t1=$(date +%s)
	row "the test suite (\`go test -count=1 ./...\`)" "$((t1 - t0)) s wall, $verdict" "—" "goal: under 3 minutes"
fi

# ---------------------------------------------------------------- table
table
say "done"
exit "$rc"
