// zs-ckpt: inspect and convert GPT-2 weight files. The commands live in checkpoint/ckpt_tool.h,
// where the tests run them in-process; this is only the program's entry point.
#include <iostream>

#include "checkpoint/ckpt_tool.h"

int main(int argc, char** argv) {
  return zs::checkpoint::run_ckpt_tool(argc, argv, std::cout, std::cerr);
}
