package cuda_test

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// scripts/gpu-check.sh run, against stub binaries that print canned
// outputs: nvidia-smi, ldconfig (no cuBLAS registered), python3 (whose
// torch wheel holds a libcublas.so.12, and which answers for
// bench/torch_gpu.py; the summary script runs on the real python3),
// timeout (which logs each limit, then runs the real one), and ferry and
// cuda.test in GPU_CHECK_BIN. Every stub logs how it was called.

// checkEnv is one run of the script in a fresh directory.
type checkEnv struct {
	t                 *testing.T
	repo, bin, stubs  string
	out, calls, limit string
	wheel             string
}

func newCheckEnv(t *testing.T) *checkEnv {
	t.Helper()
	for _, tool := range []string{"bash", "python3", "timeout", "sleep"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s", tool)
		}
	}
	realPython, _ := exec.LookPath("python3")
	realTimeout, _ := exec.LookPath("timeout")
	repo := t.TempDir()
	e := &checkEnv{t: t, repo: repo, bin: filepath.Join(repo, "bin"), stubs: filepath.Join(repo, "stubs"),
		out: filepath.Join(repo, "result"), calls: filepath.Join(repo, "calls.log"), limit: filepath.Join(repo, "timeout.log"),
		wheel: filepath.Join(repo, "wheel", "torch", "lib")}
	for _, f := range []string{"scripts/gpu-check.sh", "scripts/gpu_check_summary.py"} {
		b, err := os.ReadFile(filepath.Join("..", "..", f))
		e.must(err)
		e.write(filepath.Join(repo, f), string(b))
	}
	e.write(filepath.Join(e.wheel, "libcublas.so.12"), "")
	record := `echo "$(basename "$0") $* LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}" >>` + e.calls
	e.stub(e.stubs, "nvidia-smi", record+"\necho 'NVIDIA H200, 143771 MiB, 550.54, 5, 16'")
	e.stub(e.stubs, "ldconfig", "exit 0")
	e.stub(e.stubs, "timeout", `k=${1#--kill-after=}; echo "$k $2 $(basename "$3") ${*:4}" >>`+e.limit+"\nexec "+realTimeout+` "$@"`)
	e.stub(e.stubs, "python3", `case "${1:-}" in
-) echo "`+e.wheel+`"; exit 0 ;;
bench/torch_gpu.py) `+record+"\n"+stubTorch+` ;;
bench/torch_attention.py) `+record+"\n"+stubTorchAttention+` ;;
*) exec `+realPython+` "$@" ;;
esac`)
	e.stub(e.bin, "ferry", record+"\n"+stubFerry)
	e.stub(e.bin, "cuda.test", record+"\n"+stubCUDATest)
	e.stub(e.bin, "nccl.test", record+"\n"+stubNCCLTest)
	e.write(filepath.Join(e.wheel, "libnccl.so.2"), "")
	return e
}

func (e *checkEnv) must(err error) {
	e.t.Helper()
	if err != nil {
		e.t.Fatal(err)
	}
}

func (e *checkEnv) write(path, body string) {
	e.t.Helper()
	e.must(os.MkdirAll(filepath.Dir(path), 0o755))
	e.must(os.WriteFile(path, []byte(body), 0o755))
}

func (e *checkEnv) stub(dir, name, body string) {
	e.write(filepath.Join(dir, name), "#!/usr/bin/env bash\n"+body+"\n")
}

// run runs the script with the given budget and extra environment; it
// returns the exit status, the output and how long it took.
func (e *checkEnv) run(budget int, env ...string) (int, string, time.Duration) {
	e.t.Helper()
	cmd := exec.Command("bash", "scripts/gpu-check.sh", "run")
	cmd.Dir = e.repo
	cmd.Env = append(os.Environ(), "PATH="+e.stubs+":"+os.Getenv("PATH"), "OUT="+e.out, "GPU_CHECK_BIN="+e.bin,
		"GPU_CHECK_BUDGET="+strconv.Itoa(budget), "LD_LIBRARY_PATH=")
	cmd.Env = append(cmd.Env, env...)
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		e.t.Fatalf("gpu-check.sh run: %v\n%s", err, out)
	}
	return cmd.ProcessState.ExitCode(), string(out), took
}

func (e *checkEnv) read(name string) string {
	e.t.Helper()
	b, err := os.ReadFile(filepath.Join(e.out, name))
	if err != nil {
		e.t.Fatalf("step output %s: %v", name, err)
	}
	return string(b)
}

// stepRows reads steps.tsv: name → limit, seconds, verdict.
func (e *checkEnv) stepRows() map[string][3]string {
	rows := map[string][3]string{}
	for _, l := range strings.Split(strings.TrimSpace(e.read("steps.tsv")), "\n")[1:] {
		f := strings.Split(l, "\t")
		if len(f) != 4 {
			e.t.Fatalf("steps.tsv line %q", l)
		}
		rows[f[0]] = [3]string{f[1], f[2], f[3]}
	}
	return rows
}

var allSteps = []string{"nvidia-smi", "doctor", "conformance", "mlp-demo", "mlp-demo-json", "mlp-state-host", "gpt-demo-1", "gpt-demo-2", "gpt-bf16",
	"torch-mlp", "torch-gpt", "torch-gpt-bf16", "bandwidth", "launch", "attention", "torch-attention", "nccl", "zero3"}

func TestGPUCheckScriptWithStubs(t *testing.T) {
	e := newCheckEnv(t)
	const budget = 480
	code, out, _ := e.run(budget)
	if code != 1 { // the canned conformance run has a failure
		t.Fatalf("exit status %d, want 1 (a conformance test failed)\n%s", code, out)
	}

	// Every step ran, under a limit, and the limits fit the budget.
	rows := e.stepRows()
	sum := 0
	for _, name := range allSteps {
		r, ok := rows[name]
		if !ok {
			t.Errorf("step %s missing from steps.tsv", name)
			continue
		}
		e.read(name + ".txt")
		lim, _ := strconv.Atoi(r[0])
		sum += lim
		want := "ok"
		if name == "conformance" {
			want = "failed (exit 1)"
		}
		if r[2] != want {
			t.Errorf("step %s: %q, want %q", name, r[2], want)
		}
	}
	for _, f := range []string{"torch-mlp.json", "torch-gpt.json", "torch-gpt-bf16.json", "summary.json", "cublas.txt"} {
		e.read(f)
	}
	calls, err := os.ReadFile(e.calls)
	e.must(err)
	limits, err := os.ReadFile(e.limit)
	e.must(err)
	total := 0.0
	limited := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(string(limits)), "\n") {
		f := strings.SplitN(l, " ", 3)
		k, err1 := strconv.ParseFloat(f[0], 64)
		n, err2 := strconv.ParseFloat(f[1], 64)
		if err1 != nil || err2 != nil || len(f) < 3 {
			t.Fatalf("timeout called as %q", l)
		}
		total += k + n
		limited[strings.TrimSpace(f[2])] = true
	}
	if total > budget || sum > budget {
		t.Errorf("limits sum to %v s (steps.tsv: %d s), past the %d s budget", total, sum, budget)
	}
	// Each stub call (but ldconfig's and find_cublas's query) ran under
	// timeout, and ours with the cuBLAS find_cublas found.
	n := 0
	for _, l := range strings.Split(strings.TrimSpace(string(calls)), "\n") {
		cmd, _, _ := strings.Cut(l, " LD_LIBRARY_PATH=")
		if !limited[strings.TrimSpace(cmd)] {
			t.Errorf("%q ran without a time limit", cmd)
		}
		if !strings.HasPrefix(l, "nvidia-smi") && !strings.HasSuffix(l, "LD_LIBRARY_PATH="+e.wheel) {
			t.Errorf("a step ran without the wheel's cuBLAS on LD_LIBRARY_PATH: %s", l)
		}
		n++
	}
	if n != len(allSteps) {
		t.Errorf("%d stub calls, want one per step (%d):\n%s", n, len(allSteps), calls)
	}
	for _, want := range []string{"--layers 40 --width 4096 --batch 1024", "--model gpt --layers 12 --heads 12 --embd 768 --seq 1024 --vocab 50257 --batch 8",
		"recompute-offload", "-test.run ^(TestProbeReal|TestRealGPUConformance|TestRealTraining|TestRealBFloat16)$", "torch_gpu.py --model gpt", "recompute_offload",
		"--batch 8 --steps 2 --json --modes none,offload --precision bf16", "--modes none,offload --precision bf16 --json " + filepath.Join(e.out, "torch-gpt-bf16.json")} {
		if !strings.Contains(string(calls), want) {
			t.Errorf("no step was called with %q:\n%s", want, calls)
		}
	}

	// The summary's figures, computed from the canned outputs.
	summary := e.read("summary.txt")
	if testing.Verbose() {
		t.Logf("summary.txt:\n%s", summary)
	}
	for _, want := range []string{
		"GPU: NVIDIA H200, 143771 MiB, driver 550.54, PCIe gen 5 x16 (63.0 GB/s each way)",
		"cuBLAS 12.4.5", "cuBLAS: using " + e.wheel,
		"conformance: 5 passed, 1 failed, 1 skipped", "FAIL TestRealGPUConformance/FP32/Kernels/CompareSum",
		"HtoD 50.0 GB/s (0.79 of the link's peak), DtoH 40.0 GB/s (0.63 of the link's peak), DtoD 2000.0 GB/s",
		"kernel launch: 4.10 µs",
		"attention forward (B 8, H 12, T 1024, D 64, causal): ferry fp32 2.000 ms (6.4 TFLOP/s); PyTorch SDPA fp32 1.000 ms, bf16 0.250 ms; ferry/PyTorch fp32 2.00",
		"attention forward+backward (B 8, H 12, T 1024, D 64, causal): ferry fp32 8.000 ms (5.6 TFLOP/s); PyTorch SDPA fp32 4.000 ms, bf16 1.000 ms; ferry/PyTorch fp32 2.00",
		"nccl single rank: passed; NCCL 22105; 64 MiB all-reduce 212µs (316.6 GB/s, one rank)",
		"offload/none: ferry 1.100 vs PyTorch save_on_cpu/none 1.500 (PyTorch stream offload/none 1.100)",
		"recompute-offload/none: ferry 1.350 vs PyTorch 1.700; recompute/none: ferry 1.300 vs PyTorch 1.300",
		"offload/none: ferry 1.050 vs PyTorch save_on_cpu/none 2.000 (PyTorch stream offload/none 1.200)",
		"recompute-offload/none: ferry 1.320 vs PyTorch 2.300",
		// GPT-2 in bf16 beside PyTorch autocast, and each against its fp32 run.
		"ferry matmul: cuBLAS (BF16); PyTorch 2.4.0 (autocast bf16)",
		"offload/none: ferry 1.260 vs PyTorch save_on_cpu/none — (PyTorch stream offload/none 1.260)",
		"bf16 none: ferry 500.0 ms, step peak 1536 MiB; PyTorch autocast 400.0 ms, step peak 1280 MiB; ferry/PyTorch step 1.250, peak 1.200",
		"bf16/fp32 none: ferry step 0.500, peak 0.500; PyTorch step 0.500, peak 0.500",
		"bf16 offload: ferry 630.0 ms, step peak 1536 MiB; PyTorch autocast 504.0 ms, step peak 1280 MiB; ferry/PyTorch step 1.250, peak 1.200",
		"bf16/fp32 offload: ferry step 0.600, peak 0.500; PyTorch step 0.525, peak 0.500",
	} {
		if !strings.Contains(summary, want) {
			t.Errorf("summary lacks %q:\n%s", want, summary)
		}
	}
	if !strings.Contains(out, summary) {
		t.Errorf("the script did not print the summary")
	}
	var s struct {
		Steps   []struct{ Name string }
		Configs []struct {
			Name      string
			Precision string
			Ferry     map[string]map[string]any
			Torch     map[string]map[string]any
			Ratios    map[string]float64 `json:"ratios_to_none"`
		}
	}
	e.must(json.Unmarshal([]byte(e.read("summary.json")), &s))
	if len(s.Configs) != 3 || len(s.Configs[0].Ferry) != 7 || len(s.Configs[1].Ferry) != 6 || len(s.Configs[1].Torch) != 5 ||
		len(s.Configs[2].Ferry) != 2 || len(s.Configs[2].Torch) != 2 || s.Configs[2].Precision != "bf16" || s.Configs[1].Precision != "fp32" {
		t.Fatalf("summary.json configs: %+v", s.Configs)
	}
	off := s.Configs[0].Ferry["offload"]
	// 640 MiB each way at 40 GB/s out and 50 GB/s back, in a 110 ms step.
	if want := 671088640 / 1e9 * (1/40.0 + 1/50.0) / 0.110; math.Abs(off["copy_share_of_step"].(float64)-want) > 1e-9 {
		t.Errorf("copy share of the offload step %v, want %v", off["copy_share_of_step"], want)
	}
	if got := s.Configs[1].Ferry["offload-disk"]["x_none"]; got != 2.5 { // against run 2's none
		t.Errorf("gpt offload-disk x none = %v, want 2.5", got)
	}
	if got := s.Configs[1].Ferry["save-on-host"]["peak_step_bytes"]; got != float64(3<<30) {
		t.Errorf("gpt save-on-host step peak %v", got)
	}

	// Without the bf16 outputs (steps that failed or timed out) the
	// summary says so and still finishes.
	for _, f := range []string{"gpt-bf16.txt", "torch-gpt-bf16.json"} {
		e.must(os.Remove(filepath.Join(e.out, f)))
	}
	tsv := strings.Split(e.read("steps.tsv"), "\n")
	for i, l := range tsv {
		if strings.HasPrefix(l, "gpt-bf16\t") {
			tsv[i] = "gpt-bf16\t20\t20\ttimed out"
		}
	}
	e.write(filepath.Join(e.out, "steps.tsv"), strings.Join(tsv, "\n"))
	sum2 := exec.Command("python3", "scripts/gpu_check_summary.py", e.out, "480", "400")
	sum2.Dir = e.repo
	if b, err := sum2.CombinedOutput(); err != nil {
		t.Fatalf("summary without the bf16 outputs: %v\n%s", err, b)
	}
	summary = e.read("summary.txt")
	for _, want := range []string{
		"bf16 none: ferry: no figures (gpt-bf16: timed out); PyTorch autocast: no figures (torch-gpt-bf16: ok); ferry/PyTorch step —, peak —",
		"bf16/fp32 offload: ferry step —, peak —; PyTorch step —, peak —",
		"recompute-offload/none: ferry 1.320 vs PyTorch 2.300",
	} {
		if !strings.Contains(summary, want) {
			t.Errorf("summary without the bf16 outputs lacks %q:\n%s", want, summary)
		}
	}
}

// A step that hangs is cut off by its limit; the steps after it still run.
func TestGPUCheckScriptCutsOffAHang(t *testing.T) {
	e := newCheckEnv(t)
	const budget = 16 // the conformance step gets 16·90/480 = 3 s
	code, out, took := e.run(budget, "STUB_HANG=conformance")
	if code == 0 {
		t.Errorf("exit status 0 with a step timed out")
	}
	rows := e.stepRows()
	c := rows["conformance"]
	if c[2] != "timed out" || c[0] != "3" {
		t.Errorf("conformance step: %v, want timed out at a 3 s limit\n%s", c, out)
	}
	if secs, _ := strconv.Atoi(c[1]); secs > 4 {
		t.Errorf("the hung step ran %d s, past its 3 s limit", secs)
	}
	if r := rows["bandwidth"]; r[2] != "ok" {
		t.Errorf("bandwidth after the hang: %v", r)
	}
	if took > budget*time.Second {
		t.Errorf("the run took %v, past its %d s budget", took, budget)
	}
	s := e.read("summary.txt")
	found := false
	for _, l := range strings.Split(s, "\n") {
		if f := strings.Fields(l); len(f) == 5 && f[0] == "conformance" && f[1] == "3" && f[3]+" "+f[4] == "timed out" {
			found = true
		}
	}
	if !found {
		t.Errorf("summary does not show the timeout:\n%s", s)
	}
}

// The stubs' canned outputs. Step times are chosen so that every ratio in
// the summary is a round number.

const stubFerry = `case "$1" in
doctor) cat <<'J'
{
  "cuda": {
    "available": true,
    "cublas_library": "libcublas.so.12.4.5.8",
    "cublas_version": "12.4.5",
    "driver_version": "12.4"
  }
}
J
exit 0 ;;
esac
model=mlp modes=none,naive,save-on-host,offload,offload-disk,recompute,recompute-offload json=0 run=1 prec=fp32
while (($#)); do
  case $1 in --model) model=$2; shift ;; --modes) modes=$2; shift ;; --precision) prec=$2; shift ;; --json) json=1 ;; esac
  shift
done
[[ $modes == none,save-on-host,* ]] && run=2
backend="cuBLAS (FP32)" peak=3221225472
[[ $prec == bf16 ]] && backend="cuBLAS (BF16)" peak=1610612736
step() {
  if [[ $prec == bf16 ]]; then
    case $model:$1 in gpt:none) echo 0.5 ;; gpt:offload) echo 0.63 ;; *) echo 9.9 ;; esac
    return
  fi
  case $model:$1 in
  mlp:none) echo 0.100 ;; mlp:naive) echo 0.102 ;; mlp:save-on-host) echo 0.140 ;; mlp:offload) echo 0.110 ;;
  mlp:offload-disk) echo 0.300 ;; mlp:recompute) echo 0.130 ;; mlp:recompute-offload) echo 0.135 ;;
  gpt:none) echo 1.0 ;; gpt:offload) echo 1.05 ;; gpt:recompute) echo 1.3 ;; gpt:recompute-offload) echo 1.32 ;;
  gpt:save-on-host) echo 1.4 ;; gpt:offload-disk) echo 2.5 ;;
  esac
}
if ((json == 0)); then echo "Testing with none: ..."; exit 0; fi
printf '{"model": "%s", "matmul_backend": "%s", "description": "stub %s %s run %d", "runs": [' "$model" "$backend" "$model" "$prec" "$run"
sep=
for m in ${modes//,/ }; do
  host=0 disk=0
  case $m in offload|save-on-host|recompute-offload) host=671088640 ;; offload-disk) disk=671088640 ;; esac
  printf '%s{"mode": "%s", "step_seconds": %s, "peak_forward_bytes": 2147483648, "peak_step_bytes": %d, "reserved_peak_bytes": 4294967296, "host_peak_bytes": %d, "to_host_bytes": %d, "to_disk_bytes": %d, "stall_seconds": 0.001}' \
    "$sep" "$m" "$(step "$m")" "$peak" "$host" "$host" "$disk"
  sep=", "
done
echo ']}'`

const stubCUDATest = `args="$*"
if [[ $args == *TestRealGPUConformance* ]]; then
  [[ ${STUB_HANG:-} == conformance ]] && sleep 1000
  cat <<'T'
=== RUN   TestProbeReal
--- PASS: TestProbeReal (0.20s)
=== RUN   TestRealGPUConformance
--- FAIL: TestRealGPUConformance (3.00s)
    --- FAIL: TestRealGPUConformance/FP32 (2.00s)
        --- PASS: TestRealGPUConformance/FP32/Memory/Stats (0.01s)
        --- SKIP: TestRealGPUConformance/FP32/Memory/RecordStreamDelaysReuse (0.00s)
        --- FAIL: TestRealGPUConformance/FP32/Kernels/CompareSum (0.50s)
        --- PASS: TestRealGPUConformance/FP32/Kernels/Gemm (0.10s)
    --- PASS: TestRealGPUConformance/TF32 (1.00s)
        --- PASS: TestRealGPUConformance/TF32/Kernels/Gemm (0.10s)
=== RUN   TestRealTraining
--- PASS: TestRealTraining (0.30s)
FAIL
T
  exit 1
elif [[ $args == *BenchmarkRealCopy* ]]; then
  cat <<'T'
BenchmarkRealCopy/HtoD-16         	      20	   5368709 ns/op	50000.00 MB/s
BenchmarkRealCopy/DtoH-16         	      20	   6710886 ns/op	40000.00 MB/s
BenchmarkRealCopy/DtoD-16         	      20	    134217 ns/op	2000000.00 MB/s
PASS
T
elif [[ $args == *BenchmarkRealAttention* ]]; then
  cat <<'T'
BenchmarkRealAttention/forward-16         	      10	   2000000 ns/op	         6.44 tflops
BenchmarkRealAttention/forward+backward-16         	      10	   8000000 ns/op	         5.64 tflops
PASS
T
elif [[ $args == *BenchmarkRealLaunch* ]]; then
  printf 'BenchmarkRealLaunch-16   \t   20000\t      4100 ns/op\nPASS\n'
fi`

// stubTorchAttention answers for bench/torch_attention.py: the JSON file
// named by --json.
const stubTorchAttention = `file=
while (($#)); do
  case $1 in --json) file=$2; shift ;; esac
  shift
done
echo "sdpa float32 forward 1.000 ms"
printf '{"torch": "2.4.0", "runs": [{"dtype": "float32", "pass": "forward", "seconds": 0.001, "tflops": 12.9},
 {"dtype": "float32", "pass": "forward+backward", "seconds": 0.004, "tflops": 11.3},
 {"dtype": "bfloat16", "pass": "forward", "seconds": 0.00025, "tflops": 51.5},
 {"dtype": "bfloat16", "pass": "forward+backward", "seconds": 0.001, "tflops": 45.1}]}\n' >"$file"`

// stubNCCLTest answers for nccl.test's single-rank smoke test, naming the
// library find_nccl chose.
const stubNCCLTest = `cat <<T
=== RUN   TestRealGPUSingleRank
    real_test.go:35: NCCL 22105 from ${FERRY_LIBNCCL:-none}
    real_test.go:140: all-reduce: ok
    real_test.go:175: in-place all-reduce of 64 MiB on one rank: 212µs per call, 316.6 GB/s of the buffer (one rank moves nothing across links: this is NCCL's local path)
--- PASS: TestRealGPUSingleRank (1.20s)
PASS
T`

// stubTorch answers for bench/torch_gpu.py: a table on stdout and the JSON
// file named by --json.
const stubTorch = `model=mlp file= prec=fp32
while (($#)); do
  case $1 in --model) model=$2; shift ;; --json) file=$2; shift ;; --precision) prec=$2; shift ;; esac
  shift
done
if [[ $model:$prec == gpt:bf16 ]]; then
  runs='{"mode": "none", "step_seconds": 0.4, "peak_forward_bytes": 1, "peak_step_bytes": 1342177280, "offloaded_bytes": 0},
   {"mode": "offload", "step_seconds": 0.504, "peak_forward_bytes": 1, "peak_step_bytes": 1342177280, "offloaded_bytes": 5}'
elif [[ $model == gpt ]]; then
  runs='{"mode": "none", "step_seconds": 0.8, "peak_forward_bytes": 1, "peak_step_bytes": 2684354560, "offloaded_bytes": 0},
   {"mode": "save_on_cpu", "step_seconds": 1.6, "peak_forward_bytes": 1, "peak_step_bytes": 2684354560, "offloaded_bytes": 5},
   {"mode": "offload", "step_seconds": 0.96, "peak_forward_bytes": 1, "peak_step_bytes": 2684354560, "offloaded_bytes": 5},
   {"mode": "recompute", "step_seconds": 1.04, "peak_forward_bytes": 1, "peak_step_bytes": 2684354560, "offloaded_bytes": 0},
   {"mode": "recompute_offload", "step_seconds": 1.84, "peak_forward_bytes": 1, "peak_step_bytes": 2684354560, "offloaded_bytes": 5}'
else
  runs='{"mode": "none", "step_seconds": 0.09, "peak_forward_bytes": 1, "peak_step_bytes": 2, "offloaded_bytes": 0},
   {"mode": "naive", "step_seconds": 0.095, "peak_forward_bytes": 1, "peak_step_bytes": 2, "offloaded_bytes": 0},
   {"mode": "save_on_cpu", "step_seconds": 0.135, "peak_forward_bytes": 1, "peak_step_bytes": 2, "offloaded_bytes": 5},
   {"mode": "offload", "step_seconds": 0.099, "peak_forward_bytes": 1, "peak_step_bytes": 2, "offloaded_bytes": 5},
   {"mode": "recompute", "step_seconds": 0.117, "peak_forward_bytes": 1, "peak_step_bytes": 2, "offloaded_bytes": 0},
   {"mode": "recompute_offload", "step_seconds": 0.153, "peak_forward_bytes": 1, "peak_step_bytes": 2, "offloaded_bytes": 5}'
fi
echo "PyTorch 2.4.0 (stub) on NVIDIA H200"
printf '{"torch": "2.4.0", "model": "%s", "precision": "%s", "runs": [%s]}\n' "$model" "$prec" "$runs" >"$file"`
