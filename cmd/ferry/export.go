package main

import (
	"flag"
	"fmt"
	"io"

	"ferry/device"
	"ferry/models"
)

func init() {
	register(command{
		name:    "export",
		summary: "write a trained language model as a Hugging Face directory (config.json, model.safetensors, tokenizer)",
		setup:   setupExport,
	})
}

func setupExport(fs *flag.FlagSet) func(out io.Writer, asJSON bool) error {
	dir := fs.String("checkpoint-dir", "", "a --checkpoint-dir of `ferry train text` (its latest checkpoint), one checkpoint's directory, or a Hugging Face model directory")
	format := fs.String("format", "hf", "what to write: hf (a Hugging Face transformers directory)")
	outDir := fs.String("out", "", "the directory to write: new, or empty (its parent must exist)")
	return func(out io.Writer, asJSON bool) error {
		switch {
		case *dir == "":
			return fmt.Errorf("give --checkpoint-dir (written by `ferry train text --checkpoint-dir D`)")
		case *format != "hf":
			return fmt.Errorf("--format %q: ferry exports hf (Hugging Face transformers' layout)", *format)
		case *outDir == "":
			return fmt.Errorf("give --out, a new directory to write the Hugging Face model into")
		}
		dev, err := device.Open("cpu", device.Options{})
		if err != nil {
			return err
		}
		defer dev.Close()
		e, err := models.ExportHF(dev, *dir, *outDir)
		if err != nil {
			return err
		}
		if asJSON {
			return writeJSON(out, map[string]any{"out": e.Dir, "from": e.From, "source": e.Kind, "format": "hf",
				"model_type": e.ModelType, "class": e.Class, "parameters": e.Parameters,
				"tokenizer": e.Tokenizer, "tokenizer_note": e.TokenizerNote, "files": e.Files})
		}
		fmt.Fprintf(out, "wrote %s: a Hugging Face %s (%s, %d parameters) from %s (%s)\n", e.Dir, e.ModelType, e.Class, e.Parameters, e.From, e.Kind)
		for _, f := range e.Files {
			fmt.Fprintf(out, "  %-24s %s\n", f.Name, device.FormatBytes(f.Bytes))
		}
		if e.Tokenizer == "" {
			fmt.Fprintf(out, "no tokenizer: %s\n", e.TokenizerNote)
		} else {
			fmt.Fprintf(out, "tokenizer: %s\n", e.Tokenizer)
		}
		fmt.Fprintf(out, "read it with transformers: %s.from_pretrained(%q)\n", e.Class, e.Dir)
		return nil
	}
}
