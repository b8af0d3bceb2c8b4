// zs-train: train a GPT with ZeRO stages 0-3 or hybrid sharding (see train/cli.h, zs-train --help).
#include "train/cli.h"

int main(int argc, char** argv) { return zs::train::train_main(argc, argv); }
