// The command-line tool zs-ckpt, as a function (apps/ckpt.cc is only its main), so tests run
// every command in-process and check its output and exit code.
//
//   zs-ckpt inspect FILE [--heads N]
//       format, header, metadata, every tensor (dtype, shape, bytes), the GPT-2 config the file
//       holds and its parameter count
//   zs-ckpt convert IN OUT [--to safetensors|llmc] [--dtype f32|f16|bf16] [--heads N]
//                          [--padded-vocab N]
//       GPT-2 weights between a Hugging Face-layout safetensors file and an llm.c checkpoint;
//       the output format comes from --to or OUT's extension (.safetensors / .bin), the dtype
//       from --dtype or the input's
//   zs-ckpt inspect DIR
//       a sharded checkpoint (a step directory, or DIR with `latest`): step, world size, stage,
//       model, optimizer, loss scale, every rank file with its size and checksum, verified, and
//       every parameter (checkpoint/checkpoint_weights.h)
//   zs-ckpt export DIR OUT [--to safetensors|llmc] [--dtype f32|f16|bf16] [--padded-vocab N]
//       the checkpoint's consolidated GPT-2 weights, as --save-weights writes them, streamed
//       one tensor at a time; prints the largest tensor buffer and peak RSS next to the model size
//
// Exit codes: 0 success, 1 a file that cannot be read, is invalid or does not fit (the message
// names it), 2 a usage error. Messages go to `err`, results to `out`.
//
// Thread-safety: no shared state; concurrent calls are independent.
#pragma once

#include <ostream>

namespace zs::checkpoint {

int run_ckpt_tool(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

}  // namespace zs::checkpoint
