# What every shell test prints (sourced; tests/tap.py is the Python twin): one
# "ok - WHAT" or "not ok - WHAT" line per check, each failure followed by what
# it got; $failures counts them, for the test's exit status. Also $tmp, a
# directory of the test's own, removed when it exits.
failures=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

pass() { echo "ok - $1"; }
fail() {
  echo "not ok - $1"
  shift
  for detail in "$@"; do echo "     got $detail"; done
  failures=$((failures + 1))
}
