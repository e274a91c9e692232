package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"path/filepath"

	"ferry/models"
	"ferry/models/mlp"
	"ferry/nn"
	"ferry/train"
)

func init() {
	register(command{
		name:    "eval",
		summary: "evaluate a checkpoint: validation loss and perplexity (text) or test accuracy (mnist)",
		setup:   setupEval,
	})
}

func setupEval(fs *flag.FlagSet) func(out io.Writer, asJSON bool) error {
	dir := fs.String("checkpoint-dir", "", "a --checkpoint-dir or run directory (its latest checkpoint), or one checkpoint's directory")
	data := fs.String("data", "", "text (a file or directory) or MNIST directory to evaluate on (default: the run's own data and validation split)")
	batches := fs.Int("batches", 0, "validation batches (text; default: the run's --val-batches)")
	batch := fs.Int("batch", 0, "sequences per validation batch (text; default: the run's --batch)")
	seed := fs.Uint64("seed", 0, "seed of the validation batches (text; default: the run's --seed)")
	cacheDir := fs.String("token-cache", "", "directory of cached token ids (default: the user's cache directory, ferry/tokens)")
	devName := fs.String("device", "cpu", "device to run on")
	return func(out io.Writer, asJSON bool) error {
		set := setFlags(fs)
		if *dir == "" {
			return fmt.Errorf("give --checkpoint-dir (a run's directory, written by `ferry train`)")
		}
		if err := positive(set, map[string]int{"batches": *batches, "batch": *batch}); err != nil {
			return err
		}
		if *batches > 1<<16 || *batch > maxTrainDim {
			return fmt.Errorf("--batches is at most %d and --batch at most %d", 1<<16, maxTrainDim)
		}
		// A signal stops a load (its reads go through ctx) with exit 130.
		ctx, unlisten := interruptContext()
		defer unlisten()
		path, meta, err := train.ResolveCheckpointContext(ctx, *dir)
		if err != nil {
			return err
		}
		id := meta.Identity
		res := map[string]any{"checkpoint": path, "step": meta.Step, "task": id["task"]}
		switch id["task"] {
		case "text":
			if err := evalText(ctx, path, id, *data, *batches, *batch, *seed, set["seed"], *cacheDir, *devName, res); err != nil {
				return err
			}
		case "mnist":
			for _, f := range []string{"batches", "batch", "seed", "token-cache"} {
				if set[f] {
					return fmt.Errorf("--%s applies to text checkpoints; %s is an MNIST one (evaluated on the whole test set)", f, path)
				}
			}
			if err := evalMNIST(ctx, path, id, *data, *devName, res); err != nil {
				return err
			}
		default:
			return fmt.Errorf("checkpoint %s was written by `ferry train %v`; ferry eval reads text and mnist checkpoints", path, id["task"])
		}
		if asJSON {
			return writeJSON(out, res)
		}
		fmt.Fprintf(out, "%s (step %d) on %s:\n", path, meta.Step, res["data"])
		if res["task"] == "text" {
			fmt.Fprintf(out, "  validation loss %.4f nats per %s, perplexity %.3f (%d batches of %d × %d %ss, %s tokenizer)\n",
				res["val_loss"], res["unit"], res["perplexity"], res["batches"], res["batch"], res["seq"], res["unit"], res["tokenizer"])
		} else {
			fmt.Fprintf(out, "  test accuracy %.2f%%, test loss %.4f (%d images)\n", 100*res["accuracy"].(float64), res["test_loss"], res["images"])
		}
		return nil
	}
}

// idInt reads a whole number from a checkpoint's identity.
func idInt(id map[string]any, key string) (int, bool) {
	n, ok := id[key].(json.Number)
	if !ok {
		return 0, false
	}
	v, err := n.Int64()
	if err != nil {
		f, ferr := n.Float64()
		if ferr != nil || f != math.Trunc(f) {
			return 0, false
		}
		v = int64(f)
	}
	return int(v), true
}

func evalText(ctx context.Context, path string, id map[string]any, data string, batches, batch int, seed uint64, seedSet bool, cacheDir, devName string, res map[string]any) error {
	fam, sz, err := models.CheckpointModel(id)
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", path, err)
	}
	tokenizer := models.TokenizerOf(id)
	if err := models.LoadTokenizerOf(id); err != nil {
		return fmt.Errorf("checkpoint %s: %w", path, err)
	}
	if tokenizer == "byte" && cacheDir != "" {
		return fmt.Errorf("--token-cache holds BPE token ids, and %s is a byte-level model, which reads the bytes: drop --token-cache", path)
	}
	if cacheDir != "" {
		if err := checkOutputDir("--token-cache", cacheDir, false); err != nil {
			return err
		}
	}
	if !seedSet {
		s, ok := idInt(id, "seed")
		if !ok {
			return fmt.Errorf("checkpoint %s: its identity lacks the seed; give --seed", path)
		}
		seed = uint64(s)
	}
	if batches == 0 {
		if batches, _ = idInt(id, "val_batches"); batches == 0 {
			batches = 8 // train text's default, before runs recorded theirs
		}
	}
	if batch > 0 {
		sz["batch"] = float64(batch)
	} else if ranks, ok := idInt(id, "ranks"); ok && ranks > 1 {
		// N ranks at --batch B validated the rows of one process at N·B.
		sz["batch"] *= float64(ranks)
	}
	maxBytes, ok := idInt(id, "max_bytes")
	if !ok {
		maxBytes = 4 << 20
	}
	// The device first, and the memory checked, before the data is read.
	dev, err := openTrainDevice(devName)
	if err != nil {
		return err
	}
	defer dev.Close()
	rows, seq := sz.Int("batch"), sz.Int("seq")
	// The validation batches' token ids (int32 inputs and targets) wait in
	// host memory; each goes to the device for its own forward.
	if err := inferencePreflight(dev, fam, sz, rows, true, 8*int64(rows)*int64(seq)*int64(max(batches, 1)),
		fmt.Sprintf("lower --batch (now %d) or --batches (now %d)", rows, batches)); err != nil {
		return err
	}
	source := data
	if data == "" {
		s, ok := id["text_source"].(string)
		if !ok {
			return fmt.Errorf("checkpoint %s does not record its data (written before ferry eval): give --data", path)
		}
		source = s
	}
	txt, tok, _, err := loadCorpus(ctx, source, maxBytes, tokenizer, cacheDir)
	if err != nil {
		return err
	}
	if data == "" && id["data"] != nil && id["data"] != train.HashBytes(txt.Train, txt.Val) {
		return fmt.Errorf("the run's data (%s) has changed since it trained: give --data to evaluate on what is there now", txt.Source)
	}
	task, err := models.NewTokenTask(dev, txt, tok, fam, sz, batches, seed)
	if err != nil {
		return err
	}
	defer task.Release()
	if err := loadWeights(ctx, path, task.LM); err != nil {
		return err
	}
	nn.SetTraining(task.LM, false)
	ms, err := task.Evaluate()
	if err != nil {
		return err
	}
	loss := ms[0].Value
	if err := finiteLoss(path, "validation loss", loss); err != nil {
		return err
	}
	unit := "token"
	if tokenizer == "byte" {
		unit = "byte"
	}
	res["data"], res["tokenizer"], res["unit"] = txt.Source, tokenizer, unit
	res["batches"], res["batch"], res["seq"], res["seed"] = batches, sz.Int("batch"), sz.Int("seq"), seed
	res["val_loss"], res["perplexity"] = loss, math.Exp(loss)
	return nil
}

func evalMNIST(ctx context.Context, path string, id map[string]any, data, devName string, res map[string]any) error {
	depth, ok1 := idInt(id, "depth")
	width, ok2 := idInt(id, "width")
	rows, ok3 := idInt(id, "batch")
	seed, ok4 := idInt(id, "seed")
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return fmt.Errorf("checkpoint %s: its identity lacks depth, width, batch or seed", path)
	}
	ds, dir, err := loadMNIST(data)
	if err != nil {
		return err
	}
	if data == "" && id["data"] != nil {
		if h, err := train.HashPath(dir); err == nil && h != id["data"] {
			return fmt.Errorf("the MNIST files in %s are not those the run trained with: give --data", dir)
		}
	}
	dev, err := openTrainDevice(devName)
	if err != nil {
		return err
	}
	defer dev.Close()
	task, err := mlp.NewClassifier(dev, ds, depth, width, min(rows, ds.TrainCount()), 1, uint64(seed))
	if err != nil {
		return err
	}
	defer task.Release()
	if err := loadWeights(ctx, path, task.Model()); err != nil {
		return err
	}
	nn.SetTraining(task.Model(), false)
	ms, err := task.Evaluate()
	if err != nil {
		return err
	}
	m := metricMap(ms)
	if err := finiteLoss(path, "test loss", m["test_loss"]); err != nil {
		return err
	}
	res["data"], res["images"] = dir, ds.TestCount()
	res["accuracy"], res["test_loss"] = m["test_accuracy"], m["test_loss"]
	return nil
}

// loadWeights loads the checkpoint at path's model.safetensors into m,
// its reads stopped by ctx, refusing weights that are not finite.
func loadWeights(ctx context.Context, path string, m nn.Module) error {
	return nn.LoadSafetensorsContext(ctx, []string{filepath.Join(path, "model.safetensors")}, m, nn.LoadOptions{RequireFinite: true})
}

// finiteLoss refuses a loss that is not finite: the checkpoint's weights
// diverged (finite but huge), and a number from them means nothing.
func finiteLoss(path, what string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Errorf("checkpoint %s: its %s is %v: its weights diverged; evaluate an earlier checkpoint (the --checkpoint-dir's latest names the newest good one)", path, what, v)
	}
	return nil
}
