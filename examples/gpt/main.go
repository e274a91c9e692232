// Command gpt trains a byte-level GPT on text already on this machine: the
// Go distribution's own sources ($(go env GOROOT)/src), with no download.
// It holds out the last tenth of the text for validation, prints the
// validation loss as it falls (nats per byte, beside the unigram entropy of
// the text, which a model that ignores context cannot beat), and samples
// text at the end. The loop is train.Trainer, the task models/gpt's.
//
//	go run ./examples/gpt                       # a small model, a few minutes on 2 cores
//	go run ./examples/gpt -steps 2000 -embd 192 -layers 6
//	go run ./examples/gpt -data path/to/file/or/dir -offload
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"

	"ferry/data/text"
	"ferry/device"
	_ "ferry/device/cpu"
	_ "ferry/device/cuda"
	"ferry/models"
	_ "ferry/models/gpt"
	"ferry/offload"
	"ferry/optim"
	"ferry/train"
)

func main() {
	data := flag.String("data", "", "a text file or a directory of .go files (default: the Go distribution's sources)")
	maxBytes := flag.Int("max-bytes", 4<<20, "read at most this much text")
	devName := flag.String("device", "cpu", "cpu or cuda")
	layers := flag.Int("layers", 4, "blocks")
	heads := flag.Int("heads", 4, "attention heads")
	embd := flag.Int("embd", 128, "embedding width")
	seq := flag.Int("seq", 64, "context length in bytes")
	batch := flag.Int("batch", 16, "sequences per step")
	steps := flag.Int("steps", 600, "training steps")
	lr := flag.Float64("lr", 2e-3, "peak learning rate (linear warm-up, cosine decay to a tenth)")
	dropout := flag.Float64("dropout", 0, "dropout probability")
	evalEvery := flag.Int("eval-every", 100, "steps between validation losses")
	sample := flag.Int("sample", 400, "bytes to sample at the end")
	useOffload := flag.Bool("offload", false, "offload saved activations (ferry's offloader)")
	seed := flag.Uint64("seed", 1, "seed")
	flag.Parse()

	opts := text.Options{Limit: *maxBytes, ValFraction: 0.1}
	path := *data
	if path == "" { // every 7th file of the Go tree, to span its packages
		out, err := exec.Command("go", "env", "GOROOT").Output()
		if err != nil {
			log.Fatal("finding the Go sources: ", err)
		}
		path, opts.Stride = filepath.Join(strings.TrimSpace(string(out)), "src"), 7
	}
	txt, err := text.Load(path, opts)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("text: %s, %d bytes for training, %d held out\n", txt.Source, len(txt.Train), len(txt.Val))
	fmt.Printf("unigram entropy of the training text: %.3f nats per byte (what a model blind to context reaches)\n", text.UnigramEntropy(txt.Train))

	dev, err := device.Open(*devName, device.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	family, _ := models.Lookup("gpt")
	sizes := models.Sizes{"vocab": 256, "seq": float64(*seq), "layers": float64(*layers), "heads": float64(*heads),
		"embd": float64(*embd), "dropout": *dropout, "batch": float64(*batch)}
	task, err := models.NewTextTask(dev, txt, family.(models.LanguageFamily), sizes, 8, *seed)
	if err != nil {
		log.Fatal(err)
	}
	defer task.Release()
	fmt.Printf("model: %s\n", task.Describe())
	opt := optim.NewAdamW(task.Model().Parameters(), float32(*lr))
	opt.Beta2, opt.WeightDecay = 0.95, 0.1
	defer opt.Release()
	mode := offload.None
	if *useOffload {
		mode = offload.Offload
	}
	tr, err := train.New(dev, task, train.Config{
		Steps: *steps, Optimizer: opt, EvalEvery: *evalEvery, Unit: "bytes",
		Schedule: train.Cosine{Peak: *lr, Min: *lr / 10, Warmup: max(1, *steps/10), Total: *steps},
		Memory:   offload.Setup{Mode: mode},
		Hooks: train.Hooks{Eval: func(step int, ms []train.Metric) {
			fmt.Printf("step %5d  %s %.4f\n", step, ms[0].Name, ms[0].Value)
		}},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer tr.Close()
	res, err := tr.Run(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d steps in %.1f s, %.0f bytes/s, last train loss %.4f\n", res.Steps, res.WallSeconds, res.ItemsPerSecond, res.LastLoss)
	if *sample > 0 {
		fmt.Printf("\nsample (temperature 0.8, top-k 20), after the prompt \"func \":\n\n")
		out, err := models.Generate(context.Background(), task.LM, dev, []byte("func "), *sample, 0.8, 20, rand.New(rand.NewPCG(*seed, 5)))
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(out)
	}
}
