// zs-mem: the per-rank memory estimator (train/mem_cli.h). Example:
//   zs-mem --model gpt2-xl --ranks 8 --precision bf16 --budget 16GiB
#include <iostream>

#include "train/mem_cli.h"

int main(int argc, char** argv) { return zs::train::mem_main(argc, argv, std::cout, std::cerr); }
