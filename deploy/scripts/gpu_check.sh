#!/usr/bin/env bash
# Runs the CUDA tests and benchmarks on a GPU machine that cannot build abcd itself (no Debian
# -dev packages, no network: the `device` machines of this workplace). Two halves:
#
#   deploy/scripts/gpu_check.sh bundle [PHASE..]
#                                        # here: build, then pack the binaries the phases need
#                                        # (default: all) with the non-CUDA shared libraries they
#                                        # load into $GPU_DIR/bundle.tar.xz (GPU_DIR defaults to
#                                        # .gpu, git-ignored via .git/info/exclude)
#   deploy/scripts/gpu_check.sh run [PHASE..]
#                                        # there, from the repository root (with .gpu carried):
#                                        # unpack, then the phases (default: all, in this order):
#                                        #   tests     cuda_ops_test
#                                        #   memcheck  compute-sanitizer memcheck on the kernel tests
#                                        #   bench     GPU-size bench models + abcd-bench-cuda all
#                                        #   server    abcd-server under abcd-loadtest (cuda, cpu)
#                                        #   speculative  --speculative off and ngram:4 through
#                                        #             abcd-server on the device, one stream
#                                        #             (not in the default set)
#                                        #   profile   ncu: each kernel of eager batch-1 abc steps,
#                                        #             summed per kernel (not in the default set)
#                                        #   hf        the Hugging Face types at the fla-hub 1.3B
#                                        #             shapes (random bf16 checkpoints: gsa, gla,
#                                        #             retnet, llama): abcd-bench-cuda decode at
#                                        #             batch 1/64/256, contexts 128/4096, then
#                                        #             prefill of 2,048 tokens (gsa, llama; 1
#                                        #             and 16 sequences) against the bf16 peak
#                                        #   hf-server abcd-server on the GPU with gsa-1.3B and the
#                                        #             same-width llama at 1/64/256 streams
#                                        #             (neither hf phase is in the default set)
#
# The device tool allows 10 minutes a call and carries at most 64 MiB (67,108,864 bytes) with
# the working tree; on 2026-12-05 the tree took 65.34 MB (`du -b` of the tracked and untracked,
# not ignored files), leaving 1.77 MB, and the smallest bundle, `bundle tests` (cuda_ops_test and
# its 35 libraries, stripped, xz), took 2.62 MB (measured from that day's build, without
# packing the CUDA backend plugin, which only abcd-server loads). `bundle` prints the sum and
# fails when it is over: until the tree shrinks, a GPU session must make room for the call, e.g.
# move models/checkpoints/abc-en-de (15.4 MB, read by no phase) out of the checkout and back
# after it. Pack one bundle a call, each in its own folder (`GPU_DIR=.gpu-tests ... bundle tests
# memcheck`, `GPU_DIR=.gpu-server ... bundle server`, ...), and carry that folder.
#
# Time: every phase has its own limit, PHASE_SECONDS (default 540), and the whole run one budget,
# TOTAL_SECONDS (default 570: the device tool's 10 minutes less unpacking and slack); a phase gets
# the smaller of its limit and what the budget has left, so one `run` always ends in time, and
# each phase writes its own files, so a phase cut short still returns what it wrote. Expected
# phase times on an H200 (measured 2026-11-27 where stated, else estimated):
#   tests        ~150 s (tests + memcheck took 141 s before the Hugging Face and fla tests;
#                those add 29 hf fixtures x fp32/bf16 x 65 steps and the fla kernel tests)
#   memcheck     ~150-300 s under compute-sanitizer (it refused the device under gVisor on
#                2026-11-04: then seconds, and the phase fails)
#   bench        >320 s (model generation ~60 s)
#   server       44 s
#   hf           ~270 s: the four 1.3B bf16 checkpoints (~2.6 GB each) written in parallel
#                (a few minutes each on 2 cores here; estimated 60-120 s there), then 24 decode
#                rows of abcd-bench-cuda, then 4 prefill rows (estimated 30 s, two model loads;
#                not yet run on a GPU)
#   hf-server    ~150 s: 2 models x 3 stream counts x 14 s, plus each server's start (load,
#                parity probe, graph capture), the checkpoints reused from hf
# The issue's device items (parity, then speed) in one call, within 10 minutes:
#   GPU_DIR=.gpu-issue deploy/scripts/gpu_check.sh bundle tests hf hf-server   # here
#   GPU_DIR=.gpu-issue deploy/scripts/gpu_check.sh run tests hf hf-server      # there
# (memcheck in a call of its own). Every call unpacks the carried bundle afresh and makes the
# bench models again, so nothing stale from a warm machine is used.
#
# On a machine with a GPU and the build dependencies, skip the bundle: build with
# `cmake -DABCD_WITH_CUDA=ON` and run build/tests/cuda_ops_test and build/loadtest/abcd-bench-cuda.
# Results go to ${OUT:-.gpu/out}: test log, memcheck log, benchmark table and JSON.
set -euo pipefail
cd "$(dirname "$0")/../.."
root="$PWD"
mode="${1:-}"
build_dir="${BUILD_DIR:-build}"
gpu_dir="${GPU_DIR:-.gpu}"

# The binaries a phase runs (all from bin/ of the bundle).
binaries_of() {
  case "$1" in
    tests | memcheck) echo cuda_ops_test ;;
    bench | profile | hf) echo abcd-bench-cuda ;;
    server | speculative | hf-server) echo abcd-server abcd-loadtest ;;
    *)
      echo "unknown phase $1 (tests, memcheck, bench, server, profile, speculative, hf, hf-server)" >&2
      return 2
      ;;
  esac
}

case "$mode" in
  bundle)
    shift
    phases=("$@")
    [[ ${#phases[@]} -eq 0 ]] && phases=(tests memcheck bench server)
    binaries=()
    for phase in "${phases[@]}"; do
      needed="$(binaries_of "$phase")" || exit 2
      read -r -a more <<<"$needed"
      binaries+=("${more[@]}")
    done
    read -r -a binaries <<<"$(printf '%s\n' "${binaries[@]}" | sort -u | tr '\n' ' ')"
    # A build folder configured with CUDA is used as it is (a shared one keeps its options).
    if ! grep -qs '^ABCD_WITH_CUDA:BOOL=ON' "$build_dir/CMakeCache.txt"; then
      cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DABCD_WITH_CUDA=ON >/dev/null
    fi
    cmake --build "$build_dir" --target "${binaries[@]}" abcd_cuda_backend
    if [[ "$gpu_dir" != /* ]]; then  # a folder in the checkout: git-ignored, so carry names it
      exclude="$(git rev-parse --git-path info/exclude)"
      mkdir -p "$(dirname "$exclude")"
      grep -qx "/${gpu_dir#./}/" "$exclude" 2>/dev/null || echo "/${gpu_dir#./}/" >>"$exclude"
    fi
    staging="$(mktemp -d)"
    mkdir -p "$staging/bin" "$staging/lib"
    for binary in "${binaries[@]}"; do
      case "$binary" in
        cuda_ops_test) cp "$build_dir/tests/$binary" "$staging/bin/" ;;
        abcd-server) cp "$build_dir/server/$binary" "$staging/bin/" ;;
        *) cp "$build_dir/loadtest/$binary" "$staging/bin/" ;;
      esac
    done
    # The plugins (tokenizer, CUDA backend) are found in ../lib next to the binaries; the CUDA
    # backend's (1.8 MB of xz) only for the server, the one binary that loads it.
    cp "$build_dir/bin/libabcd_sentencepiece.so" "$staging/lib/"
    if [[ -f "$staging/bin/abcd-server" ]]; then
      cp "$build_dir/bin/libabcd_cuda_backend.so" "$staging/lib/"
    fi
    # Every shared library but the C and C++ runtimes (the GPU machine's are newer), CUDA's own
    # (it has its driver and toolkit; the bundle must not shadow them) and OpenSSL 3 (5 MiB; the
    # GPU image has it, and gRPC loaded it there on 2026-11-27).
    for binary in "$staging"/bin/* "$staging"/lib/libabcd_*.so; do
      ldd "$binary" | awk '$3 ~ /^\// {print $3}'
    done | sort -u | grep -Ev '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so|/libcu(da|dart|blas|blasLt)\.so|/lib(ssl|crypto)\.so' |
      while read -r library; do cp -L "$library" "$staging/lib/"; done
    # The device tool refused a working tree of 66.5 MB (as `du -b` counts it here) and carried
    # 64.1 MB, and the tracked files take 56.5 MB: no symbols, the strongest xz.
    strip --strip-unneeded "$staging"/bin/* "$staging"/lib/*
    echo "$root" >"$staging/source_root"  # compiled-in paths (fixtures) point here
    mkdir -p "$gpu_dir"
    tar -C "$staging" -cf - bin lib source_root | xz -9e -T2 >"$gpu_dir/bundle.tar.xz"
    rm -rf "$staging"
    # What the device tool sends: tracked files and untracked ones git does not ignore.
    tree=$( (git ls-files -z; git ls-files -z --others --exclude-standard) |
      xargs -0 du -cb 2>/dev/null | awk '$2 == "total" {sum += $1} END {print sum + 0}')
    bundle=$(stat -c %s "$gpu_dir/bundle.tar.xz")
    limit_bytes=67108864  # the device tool's 64 MiB
    echo "wrote $gpu_dir/bundle.tar.xz ($((bundle / 1000)) kB); with the working tree" \
      "$(((tree + bundle) / 1000)) kB of the device tool's $((limit_bytes / 1000)) kB"
    if ((tree + bundle > limit_bytes)); then
      echo "too large for one device call: bundle fewer phases, or make room in the tree" >&2
      exit 3
    fi
    echo "carry $gpu_dir and run:"
    echo "  GPU_DIR=$gpu_dir deploy/scripts/gpu_check.sh run ${phases[*]}"
    echo "then, here: python3 loadtest/cuda_report.py OUTPUT_FOLDER > loadtest/results/cuda-GPU-DATE.md"
    ;;
  run)
    shift
    phases=("$@")
    [[ ${#phases[@]} -eq 0 ]] && phases=(tests memcheck bench server)
    out="${OUT:-$root/$gpu_dir/out}"
    phase_limit="${PHASE_SECONDS:-540}"
    budget_end=$((SECONDS + ${TOTAL_SECONDS:-570}))
    mkdir -p "$out"
    # Always the carried bundle: a warm machine may still hold an older one in /tmp.
    rm -rf /tmp/abcd-gpu && mkdir -p /tmp/abcd-gpu
    tar -C /tmp/abcd-gpu -xJf "$gpu_dir/bundle.tar.xz"
    for phase in "${phases[@]}"; do
      needed="$(binaries_of "$phase")" || exit 2
      for binary in $needed; do
        if [[ ! -x "/tmp/abcd-gpu/bin/$binary" ]]; then
          echo "phase $phase needs $binary, which $gpu_dir/bundle.tar.xz lacks (bundle $phase)" >&2
          exit 2
        fi
      done
    done
    cublas="$(dirname "$(find / -name 'libcublas.so.13' -not -path '/proc/*' 2>/dev/null | head -n 1)")"
    export LD_LIBRARY_PATH="/tmp/abcd-gpu/lib:${cublas}:${LD_LIBRARY_PATH:-}"
    # The binaries carry the absolute source path of the build machine (fixtures, models).
    source_root="$(cat /tmp/abcd-gpu/source_root)"
    if [[ "$root" != "$source_root" ]]; then
      mkdir -p "$(dirname "$source_root")" && ln -sfn "$root" "$source_root"
    fi
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.txt"
    status=0
    for phase in "${phases[@]}"; do
      left=$((budget_end - SECONDS))
      if ((left < 10)); then
        echo "== phase $phase skipped: the run's TOTAL_SECONDS are spent" | tee -a "$out/skipped.txt"
        status=1
        continue
      fi
      limit=$((left < phase_limit ? left : phase_limit))
      echo "== phase $phase ($(date -u +%H:%M:%S), limit ${limit}s)"
      deadline=$((SECONDS + limit))
      case "$phase" in
        tests)
          # The XML holds each comparison's largest relative error (RecordProperty).
          timeout "$limit" /tmp/abcd-gpu/bin/cuda_ops_test --gtest_output="xml:$out/cuda_ops_test.xml" \
            2>&1 | tee "$out/cuda_ops_test.log" ||
            status=1
          ;;
        memcheck)
          if ! command -v compute-sanitizer >/dev/null; then
            echo "no compute-sanitizer here" | tee "$out/memcheck.log"
            continue
          fi
          timeout "$limit" compute-sanitizer --tool memcheck --error-exitcode 3 \
            /tmp/abcd-gpu/bin/cuda_ops_test \
            --gtest_filter='AttentionCudaTest.*:PrefillCudaTest.*:ModelCudaTest.*:ElementwiseCudaTest.*:FlaCudaTest.*:ModelCudaHfTest.Fp32*' \
            >"$out/memcheck.log" 2>&1 || status=1
          tail -n 3 "$out/memcheck.log"
          ;;
        bench)
          if ! timeout "$limit" python3 loadtest/make_bench_models.py --size gpu \
            --dtype bfloat16 --types abc,rfa,t2r,softmax --out /tmp/abcd-gpu/models; then
            status=1
            continue
          fi
          remaining=$((deadline - SECONDS > 1 ? deadline - SECONDS : 1))  # timeout 0: none
          timeout "$remaining" /tmp/abcd-gpu/bin/abcd-bench-cuda all \
            --models /tmp/abcd-gpu/models/abc,/tmp/abcd-gpu/models/rfa,/tmp/abcd-gpu/models/t2r,/tmp/abcd-gpu/models/softmax \
            --json "$out/cuda_bench.json" 2>&1 | tee "$out/cuda_bench.txt" || status=1
          ;;
        profile)
          # Where a batch-1 step's time goes (engine/CUDA.md): ncu times every kernel of a few
          # eager steps; the summary groups the last step's kernels by name.
          if ! command -v ncu >/dev/null; then
            echo "no ncu here" | tee "$out/ncu_summary.txt"
            continue
          fi
          if ! timeout "$limit" python3 loadtest/make_bench_models.py --size gpu \
            --dtype bfloat16 --types abc --out /tmp/abcd-gpu/models; then
            status=1
            continue
          fi
          remaining=$((deadline - SECONDS > 1 ? deadline - SECONDS : 1))
          timeout "$remaining" ncu --clock-control none --metrics gpu__time_duration.sum --csv \
            --launch-count 2500 /tmp/abcd-gpu/bin/abcd-bench-cuda decode \
            --models /tmp/abcd-gpu/models/abc --batches 1 --steps 4 --no_graphs \
            >"$out/ncu.csv" 2>"$out/ncu.err" || status=1
          python3 loadtest/ncu_kernel_summary.py "$out/ncu.csv" | tee "$out/ncu_summary.txt" ||
            status=1
          ;;
        hf | hf-server)
          # The 1.3B-shape Hugging Face checkpoints (loadtest/results/hf-1.3b.md), written here:
          # about 2.6 GB each; the tokenizer is the repository's, for the server.
          types=(gsa gla retnet llama)
          [[ "$phase" == hf-server ]] && types=(gsa llama)
          # In parallel (one core each); a finished one is kept for hf-server in the same run.
          writers=()
          for type in "${types[@]}"; do
            [[ -f /tmp/abcd-gpu/hf/$type/.done ]] && continue
            (
              if timeout $((limit / 2)) python3 models/write_hf_checkpoint.py --type "$type" \
                --preset 1.3b --dtype bf16 --tokenizer models/tokenizers/lm.model \
                --out "/tmp/abcd-gpu/hf/$type" >"/tmp/abcd-gpu/write_$type.log" 2>&1; then
                touch "/tmp/abcd-gpu/hf/$type/.done"
              else
                tail -n 5 "/tmp/abcd-gpu/write_$type.log"
                exit 1
              fi
            ) &
            writers+=($!)
          done
          for writer in "${writers[@]}"; do wait "$writer" || status=1; done
          remaining=$((deadline - SECONDS > 1 ? deadline - SECONDS : 1))
          if [[ "$phase" == hf ]]; then
            timeout "$remaining" /tmp/abcd-gpu/bin/abcd-bench-cuda decode \
              --models /tmp/abcd-gpu/hf/gsa,/tmp/abcd-gpu/hf/gla,/tmp/abcd-gpu/hf/retnet,/tmp/abcd-gpu/hf/llama \
              --batches 1,64,256 --contexts 128,4096 --json "$out/hf_bench.json" 2>&1 |
              tee "$out/hf_bench.txt" || status=1
            # A 2,048-token prompt in one pass: tokens/s and the projections' TFLOP/s against
            # the dense bf16 tensor peak (989 TFLOP/s on an H100 / H200 SXM; the goal is 40 %).
            remaining=$((deadline - SECONDS > 1 ? deadline - SECONDS : 1))
            timeout "$remaining" /tmp/abcd-gpu/bin/abcd-bench-cuda prefill \
              --models /tmp/abcd-gpu/hf/gsa,/tmp/abcd-gpu/hf/llama --prefill_tokens 2048 \
              --prefill_sequences 1,16 --repeats 3 --peak_tflops "${PEAK_TFLOPS:-989}" \
              --json "$out/hf_prefill.json" 2>&1 | tee "$out/hf_prefill.txt" || status=1
            continue
          fi
          for type in gsa llama; do
            timeout $((remaining / 2)) /tmp/abcd-gpu/bin/abcd-loadtest \
              --launch_server /tmp/abcd-gpu/bin/abcd-server \
              --server_args "--device cuda --models /tmp/abcd-gpu/hf/$type" \
              --concurrency 1,64,256 --duration 10 --warmup 4 --output_tokens 64 --ignore_eos \
              --endpoint http-completions --label "$type-1.3b-cuda" \
              --result_json "$out/hf_server_$type.json" 2>&1 | tee "$out/hf_server_$type.txt" ||
              status=1
          done
          ;;
        server)
          # The server end to end on the shipped LM, CUDA and then the CPU of the same machine,
          # with the same closed-loop workload (greedy, 64 new tokens, 1 and 64 streams).
          # Each device gets half of the phase's time.
          for device in cuda cpu; do
            timeout $((limit / 2)) /tmp/abcd-gpu/bin/abcd-loadtest \
              --launch_server /tmp/abcd-gpu/bin/abcd-server \
              --server_args "--device $device --models $root/models/checkpoints/abc-lm" \
              --concurrency 1,64 --duration 10 --warmup 4 --output_tokens 64 --ignore_eos \
              --endpoint http-completions --label "abc-lm-$device" \
              --result_json "$out/server_$device.json" 2>&1 | tee "$out/server_$device.txt" ||
              status=1
          done
          ;;
        speculative)
          # loadtest/README.md, "Speculative decoding", with the server on the GPU: one stream,
          # 32 requests x 128 tokens, the repeat workload greedy and the random one at T = 1,
          # off and ngram:4 alternating, two rounds. On the shipped abc-lm and on the GPU-size
          # abc bench model (random weights: its greedy text repeats itself, so it shows what a
          # verify step costs there, not an acceptance rate to expect of a trained model).
          python3 loadtest/make_speculative_prompts.py --out /tmp/abcd-gpu/spec || status=1
          models=("$root/models/checkpoints/abc-lm")
          if timeout $((limit / 4)) python3 loadtest/make_bench_models.py --size gpu \
            --dtype bfloat16 --types abc --out /tmp/abcd-gpu/models >/dev/null; then
            models+=(/tmp/abcd-gpu/models/abc)
          else
            status=1
          fi
          for model in "${models[@]}"; do
            for round in 1 2; do
              for spec in off ngram:4; do
                for run in "repeat --temperature 0" "random --temperature 1 --seed 3"; do
                  read -r workload sampling <<<"$run"
                  label="$(basename "$model")-$workload-${spec/:/}-r$round"
                  remaining=$((deadline - SECONDS > 1 ? deadline - SECONDS : 1))
                  # shellcheck disable=SC2086  # $sampling is two flags
                  timeout "$remaining" /tmp/abcd-gpu/bin/abcd-loadtest \
                    --launch_server /tmp/abcd-gpu/bin/abcd-server \
                    --server_args "--device cuda --models $model --prefix_cache_mb 0 --speculative $spec" \
                    --endpoint http-completions --concurrency 1 --num_requests 32 --warmup 4 \
                    --ignore_eos --prompts "/tmp/abcd-gpu/spec/$workload.jsonl" --output_tokens 128 \
                    $sampling --result_json "$out/spec-$label.json" >"$out/spec-$label.txt" 2>&1 ||
                    status=1
                  echo "$label: $(grep -h -E 'Output token throughput|speculative draft' \
                    "$out/spec-$label.txt" | tr -s ' ' | tr '\n' ';')"
                done
              done
            done
          done
          ;;
      esac
    done
    # The device tool returns at most 8 files from its $OUT: more go back as one archive.
    if (($(find "$out" -type f | wc -l) > 8)); then
      tar -C "$out" -cJf /tmp/abcd-gpu/out.tar.xz . && find "$out" -mindepth 1 -delete &&
        mv /tmp/abcd-gpu/out.tar.xz "$out/" && echo "outputs packed into $out/out.tar.xz"
    fi
    exit "$status"
    ;;
  *)
    echo "usage: $0 bundle|run [tests] [memcheck] [bench] [server] [profile] [speculative] [hf] [hf-server]" >&2
    exit 2
    ;;
esac
