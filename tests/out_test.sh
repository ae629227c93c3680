#!/usr/bin/env bash
# out/ holds what lynxgen emits for the examples; a change to the generator
# that changes generated code must regenerate it (make out) in the same commit.
set -u
cd "$(dirname "$0")/.."
fresh=$(mktemp -d)
trap 'rm -rf "$fresh"' EXIT
status=0
# SHARED_HEADERS=DIR: out/NAME keeps no lx_*.h of its own, they must be DIR's
check() { # name, model, args...
  local name=$1 model=$2
  shift 2
  if ! bin/lynxgen "$model" -o "$fresh/$name" "$@" > /dev/null; then
    echo "not ok - lynxgen generates out/$name"
    status=1
    return
  fi
  for header in ${SHARED_HEADERS:+"$fresh/$name"/lx_*.h}; do
    if ! cmp -s "$header" "$SHARED_HEADERS/$(basename "$header")"; then
      echo "not ok - out/$name's $(basename "$header") is not $SHARED_HEADERS's: keep its own"
      status=1
    fi
    rm "$header"
  done
  if diff -r -x trace.json "out/$name" "$fresh/$name" > "$fresh/$name.diff"; then
    echo "ok - out/$name is what lynxgen generates now"
  else
    echo "not ok - out/$name is stale: run 'make out' and commit it"
    head -20 "$fresh/$name.diff"
    status=1
  fi
}
check tiny-cpu examples/tiny.model --target cpu
# zero bubble: the W passes (weights_block) and the pools they read from
SHARED_HEADERS=out/tiny-cpu check tiny-zb-h1-cpu examples/tiny.model --target cpu --pp 4 --schedule zb-h1
# PipeDream-2BW: the fill and ahead forwards under their ifs, the two weight versions
SHARED_HEADERS=out/tiny-cpu check tiny-2bw-cpu examples/tiny.model --target cpu --pp 4 --schedule 2bw
# interleaved 1F1B: the chunk table, chunk_of / layer_slot, sends around the ring tagged by chunk
SHARED_HEADERS=out/tiny-cpu check tiny-interleaved-cpu examples/tiny.model --target cpu --schedule interleaved
# mini-sequences (MsT): the loops over the pieces of the MLPs and of the vocabulary-parallel LM head and loss
SHARED_HEADERS=out/tiny-cpu check tiny-mini-sequences-cpu examples/tiny.model --target cpu --tp 2 --mini-sequences 4
# activation offload (lynx-heu on 2.5 MiB GPUs): the host arena, OFFLOAD and PREFETCH copies on their streams
SHARED_HEADERS=out/tiny-cpu check tiny-offload-cpu examples/tiny.model --target cpu --tp 2 --policy lynx-heu --gpu-memory 0.0025
# fine-tuning (LoRA): the adapted linears, the frozen weights after the trained ones, no frozen gradient
SHARED_HEADERS=out/tiny-cpu check tiny-lora-cpu examples/tiny-lora.model --target cpu
# the README's example, CUDA (the default target); its trace.json is not kept in out/ (7 MB), but
# manifest.txt, which is compared, holds the SHA-256 of the one lynxgen writes
check gpt13b-cuda examples/gpt13b.model

# The same model from another working directory, through another path: the
# same bytes (generated files cite file names, never paths).
mkdir -p "$fresh/elsewhere"
if (cd "$fresh/elsewhere" && "$OLDPWD/bin/lynxgen" "$OLDPWD/examples/tiny.model" -o copy --target cpu > /dev/null) &&
  diff -r "out/tiny-cpu" "$fresh/elsewhere/copy" > /dev/null; then
  echo "ok - generating from another directory and path gives byte-identical output"
else
  echo "not ok - generating from another directory and path gives byte-identical output"
  status=1
fi
exit $status
