#!/usr/bin/env bash
# Runs vllm-omni's own duplex clients, unchanged, against a running omniserve (issue 38; spec:
# docs/REALTIME.md "vllm-omni duplex dialect"): the barge-in example (its question without
# trailing silence, and padded with 1.5 s of it), the MiniCPM-o demo and
# DuplexClient's resume after a TCP cut (scripts/vllm-omni-resume.py, which drives the client
# module itself through a cutting proxy).
#
#   scripts/vllm-omni-clients.sh CHECKOUT [URL] [MODEL]
#
# Without URL the script serves bin/omniserve itself (configs/omni-cpu.yaml, dummy:tiny) with
# replies of at most 40 tokens (thinker.max_tokens; a 256-token reply lasts a minute of audio, as
# long as the demo's own 60 s timeout; the dummy model's own replies end after 8 to 32 words).
# CHECKOUT is a vllm-omni tree (e.g. `git worktree add` of chickeyton/vllm-omni fullduplex3
# @ 0d52ef46, or `git archive` of it) holding vllm_omni/clients/ and examples/online_serving/.
# URL is omniserve's base (default ws://127.0.0.1:8099), MODEL the model it serves (default
# dummy:tiny). The client files are copied as they are into a scratch tree that adds only what
# the spec allows: an empty vllm_omni/__init__.py, the one-function vllm_omni.metrics.definitions
# stub the demo imports, and a pybase64 shim over the standard base64. Needs Debian's python3
# with python3-websockets, sox, and pocketsphinx-testdata (the speech).
# Exit status: 0 when every client completed its documented flow.
set -euo pipefail

checkout=${1:?usage: $0 CHECKOUT [URL] [MODEL]}
base=${2:-}
model=${3:-dummy:tiny}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
py=/usr/bin/python3
speech=/usr/share/pocketsphinx/test/data

# VLLM_OMNI_OUT keeps the scratch tree, the clients' outputs and their logs there.
work=${VLLM_OMNI_OUT:-}
if [ -z "$work" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work"

if [ -z "$base" ]; then
  port=${VLLM_OMNI_PORT:-18099}
  sed 's/^\(    max_tokens:\) *[0-9]*/\1 40/' "$repo/configs/omni-cpu.yaml" >"$work/omni.yaml"
  (cd "$repo" && exec bin/omniserve serve --host 127.0.0.1 --port "$port" --config "$work/omni.yaml" \
    --model "$model" --cache-dir "$work/cache") >"$work/omniserve.log" 2>&1 &
  server=$!
  trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; [ -n "${VLLM_OMNI_OUT:-}" ] || rm -rf "$work"' EXIT
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$port/ready" >/dev/null && break
    sleep 0.2
  done
  base=ws://127.0.0.1:$port
fi
mkdir -p "$work/tree/vllm_omni/metrics" "$work/tree/examples/online_serving"
cp -r "$checkout/vllm_omni/clients" "$work/tree/vllm_omni/"
cp "$checkout/examples/online_serving/barge_in_client.py" "$work/tree/examples/online_serving/"
cp -r "$checkout/examples/online_serving/minicpmo" "$work/tree/examples/online_serving/"
: >"$work/tree/vllm_omni/__init__.py"
: >"$work/tree/vllm_omni/metrics/__init__.py"
cat >"$work/tree/vllm_omni/metrics/definitions.py" <<'PY'
def compute_audio_rtf(latency_s, duration_s):
    return 0.0 if duration_s <= 0 else latency_s / duration_s
PY
cat >"$work/tree/pybase64.py" <<'PY'
from base64 import *  # noqa: F401,F403  (a shim: pybase64's API over the standard module)
PY

# The WAVs as the docs make them: mono 16 kHz PCM16, real speech, no trailing silence on the
# question (the commit alone must trigger the answer).
wav() { sox -t raw -r 16000 -e signed -b 16 -c 1 "$1" -r 16000 -c 1 -b 16 "$2" "${@:3}"; }
wav "$speech/goforward.raw" "$work/question.wav" silence 1 0.05 0.5% reverse silence 1 0.05 0.5% reverse
wav "$speech/goforward.raw" "$work/question_padded.wav" pad 0 1.5 # the engine's VAD ends this turn before the commit
wav "$speech/numbers.raw" "$work/interrupt.wav" silence 1 0.05 0.5% trim 0 3 # spoken from its first sample
wav "$speech/something.raw" "$work/ref.wav" trim 0 2
wav "$speech/numbers.raw" "$work/long.wav"

status=0
run() {
  local name=$1
  shift
  echo "== $name" >&2
  local rc=0
  (cd "$work/tree" && PYTHONPATH="$work/tree" timeout 300 "$py" "$@") >"$work/$name.out" 2>"$work/$name.err" || rc=$?
  cat "$work/$name.out"
  if [ $rc -eq 0 ]; then
    echo "== $name: ok" >&2
  else
    tail -n 20 "$work/$name.err" >&2
    echo "== $name: FAILED ($rc)" >&2
    status=1
  fi
}
run barge_in examples/online_serving/barge_in_client.py --url "$base/v1/realtime" --model "$model" \
  --ref-audio "$work/ref.wav" --question-wav "$work/question.wav" --interrupt-wav "$work/interrupt.wav" \
  --output-dir "$work/barge_in" --timeout-s 60
run barge_in_padded examples/online_serving/barge_in_client.py --url "$base/v1/realtime" --model "$model" \
  --ref-audio "$work/ref.wav" --question-wav "$work/question_padded.wav" --interrupt-wav "$work/interrupt.wav" \
  --output-dir "$work/barge_in_padded" --timeout-s 60
run minicpmo_demo examples/online_serving/minicpmo/realtime_duplex_demo.py --url "$base/v1/realtime?duplex=1" \
  --model "$model" --input-wav "$work/long.wav" --ref-audio "$work/ref.wav" --output-dir "$work/demo" --require-audio
run duplex_client_resume "$here/vllm-omni-resume.py" --url "$base" --model "$model" --wav "$work/question.wav"
exit $status
