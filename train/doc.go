// Package train is ferry's training loop: a Trainer runs a Task (the
// caller's model, batches, loss and optimizer) under a memory mode, with
// learning-rate schedules, hooks, a JSON log, plots, and checkpoints that
// resume a run exactly. It knows no dataset or model (imports_test.go);
// the ferry command's `train` subcommands give it tasks built from
// packages models and data.
//
// Determinism is a contract here: every random choice (initialisation,
// batch order, dropout) is drawn from generators whose state a checkpoint
// records, so k steps, a checkpoint and N−k more steps give the same bits
// as N steps straight.
package train
