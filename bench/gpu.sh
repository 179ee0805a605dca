#!/usr/bin/env bash
# bench/gpu.sh: what spanbert measures on a GPU, sized for a 15-minute loan; every log and figure under
# OUT, and one Markdown summary, OUT/summary.md, to paste into docs/gpu.md and docs/benchmarks.md.
#
#   bench/gpu.sh [OUT]                      on a CUDA machine: the CUDA tests and the speed benchmark (<= 8 min)
#   bench/gpu.sh --only study --data DIR [OUT]   the short GPU study (about 6 min; a second call)
#   bench/gpu.sh --dry-run [OUT]            every part on the CPU at tiny sizes, synthetic data (CI runs this)
#   bench/gpu.sh --only PARTS [OUT]         some parts: a comma-separated list of tests, bench, study, length
#
# OUT: the argument, else $OUT, else runs/gpu. Parts (each under its own time limit, so the call ends in
# time whatever happens; a part that fails or runs out of time is reported and the others still run):
#   tests   tests.log, tests.xml: pytest -m cuda (tests/test_cuda.py), the compiled step's tests among them
#   bench   bench_base.json/.log, bench_small.json/.log: bench/pretrain_step.py, BERT base and small in bf16,
#           sequence 512 and 128, two batch sizes each, spanbert and transformers' BertForPreTraining, each
#           eager and compiled: tokens/s, MFU, share of a measured matmul, ratios, compilation time, and
#           a profile of the fastest step; modernbert_step.json/.log: bench/modernbert_step.py,
#           ModernBERT-base at 2,048 tokens, realistic padding, eager and compiled vs transformers
#   study   study.yaml, study.log, study/: `spanbert study` of SpanBERT vs BERT-1seq, small model, equal
#           tokens, SQuAD 1.1 (resumes where a previous call stopped)
#   length  modernbert_length.log/.png: one ModernBERT layer's time and memory up to 8,192 tokens
# Default parts: tests,bench on a GPU; all four in --dry-run. Then summary.md (bench/gpu_summary.py) and
# env.txt (date, commit, versions, nvidia-smi). The exit status is 1 if any part failed.
#
# Settings (environment):
#   SPANBERT_DATA   the study's data folder, as --data (default ../shared/data): pretrain-corpus/, squad/
#   STUDY_TOKENS    pre-training tokens per system of the study (default 20000000, equal for both)
#   STUDY_EXAMPLES  SQuAD training examples of each fine-tuning cell (default 20000)
#   PYTHON          the interpreter (default python, else python3)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

usage() { sed -n 2,29p "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "error: bench/gpu.sh: $*" >&2; exit 2; }

dry=0
only=""
out=""
data=${SPANBERT_DATA:-../shared/data}
while [ $# -gt 0 ]; do
    case "$1" in
        --dry-run | --dry_run) dry=1 ;;
        --only) [ $# -ge 2 ] || die "found --only without a part, expected --only tests|bench|study|length"; only=$2; shift ;;
        --only=*) only=${1#--only=} ;;
        --data) [ $# -ge 2 ] || die "found --data without a folder, expected --data DIR"; data=$2; shift ;;
        --data=*) data=${1#--data=} ;;
        -h | --help) usage; exit 0 ;;
        -*) die "found option $1, expected --dry-run, --only PARTS, --data DIR or an output folder" ;;
        *) [ -z "$out" ] || die "found a second output folder $1, expected one"; out=$1 ;;
    esac
    shift
done
if [ -z "$only" ]; then
    only=$([ "$dry" = 1 ] && echo tests,bench,study,length || echo tests,bench)
fi
for part in ${only//,/ }; do
    case "$part" in tests | bench | study | length) ;; *) die "--only: found '$part', expected tests, bench, study or length (comma-separated)" ;; esac
done
want() { [[ ",$only," == *",$1,"* ]]; }
out=${out:-${OUT:-runs/gpu}}
PYTHON=${PYTHON:-$(command -v python || command -v python3 || echo python)}  # the device image has python3
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's spanbert, whatever is installed
export TQDM_DISABLE=1 PYTHONUNBUFFERED=1  # logs of lines, written as they come (a part cut by its limit keeps them)

if [ "$dry" = 0 ]; then
    "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" \
        || die "no CUDA GPU visible to torch; expected a GPU machine (or --dry-run on the CPU)"
    if want study; then
        for f in pretrain-corpus/enwiki-2015-00.txt.gz squad/train-v1.1.rebuilt.json.gz squad/dev-v1.1.json; do
            [ -f "$data/$f" ] || die "$data/$f: not found, expected the study's data (--data DIR or SPANBERT_DATA)"
        done
    fi
fi
mkdir -p "$out" || die "$out: cannot create the output folder"
out=$(cd "$out" && pwd)
failed=()
step() { echo "== $1 ($(date -u +%H:%M:%S))"; }
# limit SECONDS NAME COMMAND...: run under a time limit, log to OUT/NAME.log; a failure or a timeout is recorded
limit() {
    local seconds=$1 name=$2
    shift 2
    timeout --kill-after=10 "$seconds" "$@" > "$out/$name.log" 2>&1
    local rc=$?
    if [ $rc = 124 ] || [ $rc = 137 ]; then
        echo "(stopped at its limit of $seconds s)" >> "$out/$name.log"
        failed+=("$name (time limit $seconds s)")
    elif [ $rc != 0 ]; then
        failed+=("$name")
    fi
}

{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
    echo "mode: $([ "$dry" = 1 ] && echo dry-run on CPU || echo GPU)"
    echo "parts: $only"
    "$PYTHON" -c "import sys, torch, transformers; print('python', sys.version.split()[0]); print('torch', torch.__version__, 'cuda', torch.version.cuda); print('transformers', transformers.__version__); print('device', torch.cuda.get_device_name() if torch.cuda.is_available() else 'cpu')"
    command -v nvidia-smi > /dev/null && nvidia-smi
} > "$out/env.txt" 2>&1

if want tests; then
    step "CUDA tests -> $out/tests.log"
    # without a GPU every test skips: the dry run checks that they collect and import
    limit 150 tests "$PYTHON" -m pytest -o addopts="" -p no:xdist -m cuda tests/test_cuda.py -q -rs -p no:cacheprovider --junitxml="$out/tests.xml"
    tail -n 3 "$out/tests.log"
fi

if want bench; then
    # BERT: the headline (base, 512 x 32, the first lent GPU's setting), a larger batch, and sequence 128
    # (the first phase of --two_phase) at the same tokens a step; the study's small model at both lengths
    if [ "$dry" = 1 ]; then
        common=(--device cpu --dtype bf16 --warmup 1 --repeats 1 --rounds 1 --matmul 256 --compile --backend aot_eager --profile)
        base=(--model tiny --settings 64x2,32x4) small=(--model tiny --settings 32x2) limits=(300 300 300)
        mstep=(--smoke --compile --backend aot_eager)
    else
        common=(--device cuda --dtype bf16 --warmup 2 --repeats 3 --rounds 2 --compile --profile)
        base=(--model base --settings 512x32,512x64,128x128,128x256) small=(--model small --settings 512x64,128x256)
        limits=(170 55 85)  # with the tests 150 s: 460 s, under 8 minutes with the start and the summary
        mstep=(--device cuda --model base --seq 2048 --batch 16 --dtype bf16 --rounds 2 --repeats 3 --compile)
    fi
    step "speed benchmark, BERT base -> $out/bench_base.log, .json"
    limit "${limits[0]}" bench_base "$PYTHON" bench/pretrain_step.py "${common[@]}" "${base[@]}" --out "$out/bench_base.json"
    grep -E "^-- |speed-up|compiled vs eager|compilation of|profile of|failed" "$out/bench_base.log"
    step "speed benchmark, BERT small -> $out/bench_small.log, .json"
    limit "${limits[1]}" bench_small "$PYTHON" bench/pretrain_step.py "${common[@]}" "${small[@]}" --out "$out/bench_small.json"
    grep -E "^-- |speed-up spanbert at|compiled vs eager, spanbert|failed" "$out/bench_small.log"
    step "ModernBERT step -> $out/modernbert_step.log, .json"
    limit "${limits[2]}" modernbert_step "$PYTHON" bench/modernbert_step.py "${mstep[@]}" --out "$out/modernbert_step.json"
    tail -n 6 "$out/modernbert_step.log"
fi

if want length; then
    step "ModernBERT layer against the length -> $out/modernbert_length.log"
    if [ "$dry" = 1 ]; then mlen=(--smoke); else mlen=(--device cuda --dtype bf16 --plot "$out/modernbert_length.png"); fi
    limit 300 modernbert_length "$PYTHON" bench/modernbert_length.py "${mlen[@]}"
    tail -n 4 "$out/modernbert_length.log"
fi

if want study; then
    step "study: SpanBERT vs BERT-1seq on SQuAD 1.1 -> $out/study.log, $out/study/"
    if [ "$dry" = 1 ]; then
        data="$out/data"
        "$PYTHON" bench/gpu_dry_data.py "$data" || failed+=(study-data)
        model=tiny vocab=300 tokens=8192 seq=64 batch=8 examples=32 ft_seq=128 ft_batch=8 warmup=1 study_s=300
    else
        # sized to about 6 minutes on an H100 (a killed study resumes where it stopped when run again)
        model=small vocab=28996 tokens=${STUDY_TOKENS:-20000000} seq=256 batch=64
        examples=${STUDY_EXAMPLES:-20000} ft_seq=384 ft_batch=32 warmup=300 study_s=420
    fi
    data=$(cd "$data" && pwd)
    cat > "$out/study.yaml" << EOF
# written by bench/gpu.sh$([ "$dry" = 1 ] && echo " --dry-run (synthetic data, tiny sizes: not evidence of anything)")
corpus: $data/pretrain-corpus/enwiki-2015-00.txt.gz
vocab_size: $vocab
model: $model
budget_tokens: $tokens
max_seq_length: $seq
batch_size: $batch
pretrain_options: {learning_rate: 5.0e-4, warmup_steps: $warmup}
seeds: 1
output_dir: $out/study
systems: [bert-1seq, spanbert]
tasks:
  - {task: squad, train: $data/squad/train-v1.1.rebuilt.json.gz, dev: $data/squad/dev-v1.1.json,
     learning_rates: [3.0e-4], options: {num_train_epochs: 1, max_train_examples: $examples,
     max_seq_length: $ft_seq, per_device_train_batch_size: $ft_batch}}
EOF
    limit "$study_s" study "$PYTHON" -m spanbert study "$out/study.yaml"
    tail -n 15 "$out/study.log"
fi

echo "== everything is under $out; the summary, last (the end of the output is what the device tool returns):"
step "summary -> $out/summary.md"
"$PYTHON" bench/gpu_summary.py "$out" ${failed[@]+--failed "${failed[@]}"} || failed+=(summary)
if [ ${#failed[@]} -gt 0 ]; then
    echo "failed: ${failed[*]} (see their logs)" >&2
    exit 1
fi
