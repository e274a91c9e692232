// Package train holds what a training run needs besides the model: data
// (MNIST from the GoMNIST module, byte-level text from files on the
// machine), learning-rate schedules, and checkpoints that resume a run
// exactly. The ferry command's `train` subcommands are built from it.
//
// Determinism is a contract here: every random choice (initialisation,
// batch order, dropout) is drawn from generators whose state a checkpoint
// records, so k steps, a checkpoint and N−k more steps give the same bits
// as N steps straight.
package train
