#!/usr/bin/env bash
# `make test`: the whole suite as two pytest streams side by side, so it stays within the
# 15-minute budget on a 2-core machine. The tests that mostly wait on the servers and
# browsers they start (PostgreSQL, the cluster, Mosquitto, Chromium, the hostile inputs'
# daemons) and the benchmarks' smoke run (SIDE below: about half of the suite's wall
# time; in one CI run 795 s beside 738 s for the rest, before tests/deploy moved back to
# the rest) run beside everything else;
# each stream writes its own coverage data, combined at the end, where the configured
# fail_under (pyproject.toml) is checked once for the whole suite. Exit status: non-zero
# if either stream or the coverage check failed.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
rm -f .coverage .coverage.* coverage.xml
# Byte-compile the checkout once: where PYTHONDONTWRITEBYTECODE is set (as on the 2-core
# machines the suite is timed on) no process writes .pyc files, so every `memwarden`
# process a test starts would compile about a hundred modules from source again (0.1-0.2 s
# of CPU each time). Python reads the files whatever that variable says; an edited file is
# compiled afresh.
"$PY" -m compileall -q -j 2 src tests benchmarks examples >/dev/null
SIDE=(tests/pg tests/cluster tests/mqtt tests/web tests/security tests/test_benchmarks_smoke.py)
ignore=()
for path in "${SIDE[@]}"; do ignore+=("--ignore=$path"); done
side_log=$(mktemp)
COVERAGE_FILE=.coverage.pg "$PY" -m pytest "${SIDE[@]}" -p no:cacheprovider \
    --cov --cov-report= --cov-fail-under=0 --durations=10 >"$side_log" 2>&1 &
side=$!
COVERAGE_FILE=.coverage.rest "$PY" -m pytest "${ignore[@]}" \
    -p no:cacheprovider --cov --cov-report= --cov-fail-under=0 --durations=15 "$@"
rest=$?
wait "$side"
side_rc=$?
echo "==================== ${SIDE[*]} (the stream beside) ===================="
cat "$side_log"
rm -f "$side_log"
"$PY" -m coverage combine .coverage.pg .coverage.rest >/dev/null
"$PY" -m coverage xml -q
"$PY" -m coverage report
cov=$?
echo "streams: rest exit $rest, beside exit $side_rc, coverage exit $cov"
[ "$rest" -eq 0 ] && [ "$side_rc" -eq 0 ] && [ "$cov" -eq 0 ]
