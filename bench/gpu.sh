#!/usr/bin/env bash
# bench/gpu.sh: what spanbert measures on a GPU, in one command; every log and figure under OUT.
#
#   bench/gpu.sh [OUT]                   on a CUDA machine: the CUDA tests, the speed benchmark, a short study
#   bench/gpu.sh --dry-run [OUT]         all of it on the CPU at tiny sizes, on synthetic data (CI runs this)
#   bench/gpu.sh --only PART [OUT]       one part: tests, bench or study (each fits a 10-minute job;
#                                        the study resumes where a previous call stopped)
#
# OUT: the argument, else $OUT, else runs/gpu. Settings (environment):
#   SPANBERT_DATA   the data folder of the study (default ../shared/data): pretrain-corpus/, squad/
#   BENCH_BATCH     sequences per step of the benchmark (default 32; sequence 512, base, bf16)
#   MODERNBERT_BATCH  sequences per step of the ModernBERT benchmark (default 16; sequence 2048, base, bf16)
#   STUDY_TOKENS    pre-training tokens per system of the study (default 20000000, equal for both)
#   STUDY_EXAMPLES  SQuAD training examples of each fine-tuning cell (default 20000)
#   PYTHON          the interpreter (default python)
#
# Parts: tests.log + tests.xml (pytest -m cuda), bench.log + bench.json (bench/pretrain_step.py:
# spanbert vs transformers' BertForPreTraining with SDPA, tokens/s, ratio, MFU vs the dense bf16 peak
# and vs a measured bf16 matmul; modernbert_step.log: bench/modernbert_step.py, ModernBERT-base at 2,048
# tokens vs transformers' ModernBertForMaskedLM; modernbert_length.log + .png: one layer's time and memory
# against the length up to 8,192, local and global), study.yaml + study.log + study/ (`spanbert study`: SpanBERT vs
# BERT-1seq, small model, equal tokens, SQuAD 1.1), env.txt (versions, nvidia-smi). A part that fails
# is reported and the others still run; the exit status is 1 if any failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

usage() { sed -n 2,23p "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "error: bench/gpu.sh: $*" >&2; exit 2; }

dry=0
only=all
out=""
while [ $# -gt 0 ]; do
    case "$1" in
        --dry-run | --dry_run) dry=1 ;;
        --only) [ $# -ge 2 ] || die "found --only without a part, expected --only tests|bench|study"; only=$2; shift ;;
        --only=*) only=${1#--only=} ;;
        -h | --help) usage; exit 0 ;;
        -*) die "found option $1, expected --dry-run, --only PART or an output folder" ;;
        *) [ -z "$out" ] || die "found a second output folder $1, expected one"; out=$1 ;;
    esac
    shift
done
case "$only" in all | tests | bench | study) ;; *) die "--only: found '$only', expected tests, bench or study" ;; esac
out=${out:-${OUT:-runs/gpu}}
PYTHON=${PYTHON:-python}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's spanbert, whatever is installed
export TQDM_DISABLE=1  # logs of lines, not progress bars
data=${SPANBERT_DATA:-../shared/data}

if [ "$dry" = 0 ]; then
    "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" \
        || die "no CUDA GPU visible to torch; expected a GPU machine (or --dry-run on the CPU)"
    if [ "$only" = all ] || [ "$only" = study ]; then
        for f in pretrain-corpus/enwiki-2015-00.txt.gz squad/train-v1.1.rebuilt.json.gz squad/dev-v1.1.json; do
            [ -f "$data/$f" ] || die "$data/$f: not found, expected the study's data (set SPANBERT_DATA)"
        done
    fi
fi
mkdir -p "$out" || die "$out: cannot create the output folder"
out=$(cd "$out" && pwd)
failed=()
want() { [ "$only" = all ] || [ "$only" = "$1" ]; }
step() { echo "== $1 ($(date -u +%H:%M:%S))"; }

{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)"
    echo "mode: $([ "$dry" = 1 ] && echo dry-run on CPU || echo GPU)"
    "$PYTHON" -c "import sys, torch, transformers; print('python', sys.version.split()[0]); print('torch', torch.__version__, 'cuda', torch.version.cuda); print('transformers', transformers.__version__); print('device', torch.cuda.get_device_name() if torch.cuda.is_available() else 'cpu')"
    command -v nvidia-smi > /dev/null && nvidia-smi
} > "$out/env.txt" 2>&1

if want tests; then
    step "CUDA tests -> $out/tests.log"
    # without a GPU every test skips: the dry run checks that they collect and import
    "$PYTHON" -m pytest -m cuda tests/test_cuda.py -q -rs -p no:cacheprovider --junitxml="$out/tests.xml" \
        > "$out/tests.log" 2>&1 || failed+=(tests)
    tail -n 3 "$out/tests.log"
fi

if want bench; then
    step "speed benchmark -> $out/bench.log, $out/bench.json"
    if [ "$dry" = 1 ]; then
        bench=(--device cpu --model tiny --seq 64 --batch 2 --dtype bf16 --warmup 1 --repeats 1 --matmul 256)
    else
        bench=(--device cuda --model base --seq 512 --batch "${BENCH_BATCH:-32}" --dtype bf16)
    fi
    "$PYTHON" bench/pretrain_step.py "${bench[@]}" --out "$out/bench.json" > "$out/bench.log" 2>&1 || failed+=(bench)
    cat "$out/bench.log"
    step "ModernBERT step and length curve -> $out/modernbert_step.log, $out/modernbert_length.log"
    if [ "$dry" = 1 ]; then
        mstep=(--smoke)
        mlen=(--smoke)
    else
        mstep=(--device cuda --model base --seq 2048 --batch "${MODERNBERT_BATCH:-16}" --dtype bf16)
        mlen=(--device cuda --dtype bf16 --plot "$out/modernbert_length.png")
    fi
    "$PYTHON" bench/modernbert_step.py "${mstep[@]}" > "$out/modernbert_step.log" 2>&1 || failed+=(modernbert-step)
    cat "$out/modernbert_step.log"
    "$PYTHON" bench/modernbert_length.py "${mlen[@]}" > "$out/modernbert_length.log" 2>&1 || failed+=(modernbert-length)
    cat "$out/modernbert_length.log"
fi

if want study; then
    step "study: SpanBERT vs BERT-1seq on SQuAD 1.1 -> $out/study.log, $out/study/"
    if [ "$dry" = 1 ]; then
        data="$out/data"
        "$PYTHON" bench/gpu_dry_data.py "$data" || failed+=(study-data)
        model=tiny vocab=300 tokens=8192 seq=64 batch=8 examples=32 ft_seq=128 ft_batch=8 warmup=1
    else
        model=small vocab=28996 tokens=${STUDY_TOKENS:-20000000} seq=256 batch=64
        examples=${STUDY_EXAMPLES:-20000} ft_seq=384 ft_batch=32 warmup=300
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
    "$PYTHON" -m spanbert study "$out/study.yaml" > "$out/study.log" 2>&1 || failed+=(study)
    tail -n 15 "$out/study.log"
fi

echo "== everything is under $out"
if [ ${#failed[@]} -gt 0 ]; then
    echo "failed: ${failed[*]} (see their logs)" >&2
    exit 1
fi
