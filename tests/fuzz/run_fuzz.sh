#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run_fuzz.sh FUZZER SAMPLE_TOOL WORKDIR SECONDS: fresh seeds from the writer (SAMPLE_TOOL), an
# empty corpus, then FUZZER for SECONDS. Fails (non-zero) on any crash, leak, sanitizer report,
# timeout or out-of-memory; the input that did it is left in WORKDIR/artifacts/.
set -euo pipefail
fuzzer=$1 samples=$2 work=$3 seconds=$4
rm -rf "$work"
mkdir -p "$work/corpus" "$work/artifacts"
"$samples" "$work/seeds"
echo "seeds: $(ls "$work/seeds" | wc -l) files from the writer; fuzzing for ${seconds}s"
exec "$fuzzer" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
  -artifact_prefix="$work/artifacts/" "$work/corpus" "$work/seeds"
