#!/usr/bin/env bash
# Start `python -m sglang.launch_server` on loopback with the tiny Llama, send
# one POST /generate (bounded), then kill the server by PID.
#   run_server_check.sh VENV MODEL_DIR
set -euo pipefail
VENV=${1:?venv}; MODEL=${2:?model dir}
HERE=$(cd "$(dirname "$0")" && pwd)
export PYTHONPATH="$HERE/stubs${PYTHONPATH:+:$PYTHONPATH}"
export SGLANG_USE_CPU_ENGINE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export SGLANG_NCCL_SO_PATH=/nonexistent/libnccl.so.2
export SGLANG_CPU_OMP_THREADS_BIND=${SGLANG_CPU_OMP_THREADS_BIND:-0-$(( $(nproc) - 1 ))}
PORT=$("$VENV/bin/python" -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
LOG=$(mktemp /tmp/sglang_server.XXXXXX.log)
t0=$(date +%s.%N)
"$VENV/bin/python" -m sglang.launch_server --model-path "$MODEL" --device cpu \
  --attention-backend torch_native --sampling-backend pytorch --disable-cuda-graph \
  --host 127.0.0.1 --port "$PORT" --mem-fraction-static 0.05 --max-total-tokens 2048 \
  --context-length 256 --max-running-requests 8 --chunked-prefill-size 256 \
  --grammar-backend none --log-level warning >"$LOG" 2>&1 &
PID=$!
cleanup() { kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; }
trap cleanup EXIT
ok=""
for _ in $(seq 1 180); do   # at most ~180 s
  if ! kill -0 "$PID" 2>/dev/null; then echo "server died; log: $LOG"; tail -30 "$LOG"; exit 1; fi
  if curl -s -m 2 "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then ok=1; break; fi
  sleep 1
done
[ -n "$ok" ] || { echo "server not ready; log: $LOG"; tail -30 "$LOG"; exit 1; }
t1=$(date +%s.%N)
RESP=$(curl -s -m 60 -X POST "http://127.0.0.1:$PORT/generate" -H 'Content-Type: application/json' \
  -d '{"text": "the capital of france is", "sampling_params": {"max_new_tokens": 4, "temperature": 0, "ignore_eos": true}}')
t2=$(date +%s.%N)
echo "response: $RESP"
kids=$(pgrep -P "$PID" | tr '\n' ' ' || true)   # scheduler(s) + detokenizer
for k in $kids; do echo "child $k: $(tr '\0' ' ' </proc/$k/cmdline | cut -c1-100)"; done
kill "$PID"; wait "$PID" 2>/dev/null && rc=0 || rc=$?
t3=$(date +%s.%N)
trap - EXIT
sleep 1
left=""; for k in $kids; do kill -0 "$k" 2>/dev/null && left="$left $k"; done
echo "server exit status after SIGTERM: $rc; children were: $kids; still alive:${left:- none}; log: $LOG"
python3 -c "print(f'server ready {$t1-$t0:.1f}s, /generate {$t2-$t1:.2f}s, stop {$t3-$t2:.1f}s')"
echo "$RESP" | grep -q '"completion_tokens":4'
