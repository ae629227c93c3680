#!/usr/bin/env bash
# out/ holds what lynxgen emits for the examples; a change to the generator
# that changes generated code must regenerate it (make out) in the same commit.
set -u
cd "$(dirname "$0")/.."
fresh=$(mktemp -d)
trap 'rm -rf "$fresh"' EXIT
status=0
check() { # name, model, args...
  local name=$1 model=$2
  shift 2
  if ! bin/lynxgen "$model" -o "$fresh/$name" "$@" > /dev/null; then
    echo "not ok - lynxgen generates out/$name"
    status=1
  elif diff -r "out/$name" "$fresh/$name" > "$fresh/$name.diff"; then
    echo "ok - out/$name is what lynxgen generates now"
  else
    echo "not ok - out/$name is stale: run 'make out' and commit it"
    head -20 "$fresh/$name.diff"
    status=1
  fi
}
check tiny-cpu examples/tiny.model --target cpu
exit $status
