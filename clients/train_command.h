// `headroom train`: train a model under a memory budget on this machine.
#ifndef HEADROOM_CLIENTS_TRAIN_COMMAND_H_
#define HEADROOM_CLIENTS_TRAIN_COMMAND_H_

#include "CLI/CLI.hpp"
#include "clients/cli.h"

namespace headroom::clients {

// Plans the model's training step for --budget (or unconstrained), then trains it for
// --steps on the synthetic task on --backend, printing per step the loss, step time and
// measured arena peak with a progress bar; --json prints one JSON object per step and a
// final summary. Fails before anything is allocated when no plan fits the budget.
// With --dataset (fashion-mnist or a dataset directory) it trains --epochs over real data
// through executor::FitLoop instead: a learning-rate schedule, evaluation on held-out items
// every --eval-every epochs (inside the training arena), early stopping, checkpoints and
// --resume, progress with the time left on stderr; a line (or JSON object) per epoch, and
// the summary gains the last evaluation, the input wait and the callbacks' overhead.
Command AddTrainCommand(CLI::App& headroom, const CommandIo& io);

}  // namespace headroom::clients

#endif  // HEADROOM_CLIENTS_TRAIN_COMMAND_H_
