#!/usr/bin/env bash
# The whole suite (`make test`) as two pytest processes at once, as the two cores have it:
# - the system tests (real clusters, containers, nemeses, a browser) mostly wait on the
#   processes they drive, and keep the CPU first so that their timing (Raft elections, leases,
#   deadlines) is what it is when they run alone;
# - the analysis tests (Spark on small histories, CPU-bound) run beside them at a lower priority
#   (nice 10), with the Spark JVM they start, and take what the system tests leave.
# A test is an analysis test when it uses Spark (the `spark` mark, which tests/conftest.py
# gives every user of the session's Spark fixture) and starts nothing of the system under test.
# The analysis half is the longer (25 and 40 minutes on a 2-core machine): moving its longest
# module to the system half gained nothing, as the system half's own Spark tests then hold the
# CPU it would have had.
# Both halves always run; the exit status is the first failing half's (the system's first).
# Usage: tests/suite.sh PYTHON [PYTEST_ARGS...]
set -uo pipefail
cd "$(dirname "$0")/.."

python=$1
shift
analysis='spark and not (cluster or docker or root or browser)'
# each half its own temporary directories (pytest rotates the ones it shares by default)
tmp=$(mktemp -d -t schemachaos-tests.XXXXXX)
log=$tmp/analysis.log

nice -n 10 "$python" -u -m pytest -q -ra --durations=15 -m "$analysis" \
    --basetemp "$tmp/analysis" "$@" > "$log" 2>&1 &
analysis_pid=$!
# a non-interactive shell starts a background job with SIGINT ignored: pass Ctrl-C on, and
# never leave the analysis half running after this script
trap 'kill -INT "$analysis_pid" 2> /dev/null' INT TERM
trap 'kill "$analysis_pid" 2> /dev/null; [ -n "${keep:-}" ] || rm -rf "$tmp"' EXIT

echo "== the system tests (the analysis tests run beside them; their output follows) =="
"$python" -m pytest -q -ra --durations=15 -m "not ($analysis)" --basetemp "$tmp/system" "$@"
system_rc=$?
wait "$analysis_pid"
analysis_rc=$?
# a Ctrl-C ends the first wait at once: wait again, for the half's own summary and status
while kill -0 "$analysis_pid" 2> /dev/null; do
    wait "$analysis_pid"
    analysis_rc=$?
done

echo "== the analysis tests (nice 10, beside the system tests) =="
cat "$log"
echo "== system tests: exit ${system_rc}; analysis tests: exit ${analysis_rc} =="
# 5 is pytest's "no test selected": a half that PYTEST_ARGS left empty
[ "$system_rc" -eq 5 ] && system_rc=0
[ "$analysis_rc" -eq 5 ] && analysis_rc=0
if [ "$system_rc" -ne 0 ] || [ "$analysis_rc" -ne 0 ]; then
    keep=1
    echo "the failed tests' files are kept in $tmp"
fi
if [ "$system_rc" -ne 0 ]; then
    exit "$system_rc"
fi
exit "$analysis_rc"
