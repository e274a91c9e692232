// Package train holds what a training run needs besides the model and
// its data (it knows no dataset or model: imports_test.go): the Trainer, which runs a Task (a model, its batches and its
// loss) under a Config (steps, optimizer, schedule, memory mode,
// evaluation, checkpoints, logs, data-parallel ranks); learning-rate
// schedules; checkpoints that resume a run exactly; and Preflight, which
// refuses a run whose memory cannot fit before anything large is
// allocated. The ferry command's `train` subcommands are built from it.
//
// Run reads as its phases, each in its file: resume (phase_resume.go),
// then for every step train it (phase_step.go, step.go), evaluate
// (phase_evaluate.go) and checkpoint (phase_checkpoint.go), and finish
// (phase_finish.go). What data-parallel training adds is in parallel.go.
//
// Charts are opt-in: a Plotter in Config.Plots (package train/plot writes
// PNG and SVG), so that this package links no plotting library.
//
// Every setting that cannot work is refused by New, before any training
// work, with a *ConfigError naming the Config field.
//
// Determinism is a contract here: every random choice (initialisation,
// batch order, dropout) is drawn from generators whose state a checkpoint
// records, so k steps, a checkpoint and N−k more steps give the same bits
// as N steps straight.
package train
