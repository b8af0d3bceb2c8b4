// zs-ckpt: argument parsing (CLI11), the inspect, convert and export commands, exit codes.
#include "checkpoint/ckpt_tool.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <filesystem>
#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_weights.h"
#include "checkpoint/gpt2_weights.h"
#include "runtime/error.h"

namespace zs::checkpoint {
namespace {

constexpr int kExitFile = 1;
constexpr int kExitUsage = 2;

// A usage error found after parsing (a bad --to or --dtype value, an unknown extension).
struct UsageError {
  std::string message;
};

// ZS_CHECK messages start with "[rank -] file.cc:42: ", which helps a developer but not a user
// of the tool; keep only the text after it.
std::string user_message(const std::string& what) {
  if (what.compare(0, 6, "[rank ") == 0) {
    const size_t colon = what.find(": ");
    if (colon != std::string::npos) return what.substr(colon + 2);
  }
  return what;
}

std::string shape_text(const Shape& shape) { return shape_str(shape); }

int64_t gpt2_parameter_count(const models::GptConfig& config) {
  int64_t total = 0;
  for (const Gpt2TensorRef& ref : gpt2_hf_mapping(config)) total += shape_numel(ref.shape);
  return total;
}

void print_table_row(std::ostream& out, const std::string& name, const std::string& dtype,
                     const std::string& shape, uint64_t bytes, size_t name_width) {
  out << "  " << std::left << std::setw(static_cast<int>(name_width)) << name << "  "
      << std::setw(5) << dtype << "  " << std::setw(18) << shape << "  " << std::right << bytes
      << "\n";
}

void inspect(const std::string& path, int64_t heads, std::ostream& out) {
  const WeightFormat format = detect_weight_format(path);
  out << "file: " << path << "\n";
  if (format == WeightFormat::kLlmc) {
    const LlmcReader reader(path);
    const LlmcConfig& c = reader.config();
    out << "format: llm.c GPT-2 checkpoint, version " << reader.version() << " ("
        << stored_dtype_name(reader.dtype()) << ")\n";
    out << "header: maxT " << c.max_seq_len << ", V " << c.vocab_size << ", Vp "
        << c.padded_vocab_size << ", L " << c.n_layer << ", NH " << c.n_head << ", C " << c.channels
        << "\n";
    out << "tensors: " << reader.tensors().size() << "\n";
    for (const LlmcTensor& t : reader.tensors()) {
      print_table_row(out, t.name, stored_dtype_name(reader.dtype()), shape_text(t.shape),
                      static_cast<uint64_t>(t.numel()) * stored_dtype_size(reader.dtype()), 8);
    }
  } else {
    const SafetensorsReader reader(path);
    out << "format: safetensors (header " << reader.header_bytes() << " bytes, data "
        << reader.file_bytes() - 8 - reader.header_bytes() << " bytes)\n";
    if (!reader.metadata().empty()) {
      out << "metadata:";
      for (const auto& item : reader.metadata()) out << " " << item.first << "=" << item.second;
      out << "\n";
    }
    out << "tensors: " << reader.names().size() << "\n";
    size_t width = 4;
    for (const std::string& name : reader.names()) width = std::max(width, name.size());
    for (const std::string& name : reader.names()) {
      const SafetensorsTensorInfo& info = reader.info(name);
      print_table_row(out, name, stored_dtype_name(info.dtype), shape_text(info.shape),
                      info.nbytes(), width);
    }
  }
  try {
    std::string heads_source;
    const models::GptConfig config = infer_gpt2_config(path, heads, &heads_source);
    out << "GPT-2 config: " << models::describe(config) << " (heads from " << heads_source << ")\n";
    out << "parameters: " << gpt2_parameter_count(config) << "\n";
  } catch (const InvalidArgument& error) {
    out << "GPT-2 config: none (" << user_message(error.what()) << ")\n";
  }
}

struct ConvertOptions {
  std::string to;
  std::string dtype;
  int64_t heads = 0;
  int64_t padded_vocab = 0;
};

// The output format and dtype --to, --dtype and OUT's extension name; `dtype_given` says
// whether --dtype was given (else options.dtype stays f32).
Gpt2ExportOptions output_options(const ConvertOptions& flags, const std::string& output,
                                 bool* dtype_given) {
  Gpt2ExportOptions options;
  if (!flags.to.empty()) {
    if (flags.to == "safetensors") {
      options.format = WeightFormat::kSafetensors;
    } else if (flags.to == "llmc" || flags.to == "llm.c") {
      options.format = WeightFormat::kLlmc;
    } else {
      throw UsageError{"--to must be safetensors or llmc, not '" + flags.to + "'"};
    }
  } else if (!weight_format_from_extension(output, &options.format)) {
    throw UsageError{"cannot tell the output format from '" + output +
                     "'; name it *.safetensors or *.bin (llm.c), or pass --to"};
  }
  const bool given = !flags.dtype.empty();
  if (given) {
    if (!parse_stored_dtype(flags.dtype, &options.dtype) || !is_float_dtype(options.dtype)) {
      throw UsageError{"--dtype must be f32, f16 or bf16, not '" + flags.dtype + "'"};
    }
    if (options.format == WeightFormat::kLlmc && options.dtype == StoredDType::kF16) {
      throw UsageError{"llm.c checkpoints hold f32 or bf16, not f16"};
    }
  }
  options.padded_vocab = flags.padded_vocab;
  *dtype_given = given;
  return options;
}

void convert(const std::string& input, const std::string& output, const ConvertOptions& flags,
             std::ostream& out) {
  bool dtype_given = false;
  Gpt2ExportOptions options = output_options(flags, output, &dtype_given);

  const models::GptConfig config = infer_gpt2_config(input, flags.heads);
  const Gpt2WeightSource source(input, config);
  if (!dtype_given) {
    // Keep the input's precision; f16 into llm.c widens to f32 (exact).
    StoredDType input_dtype = StoredDType::kF32;
    if (source.format() == WeightFormat::kLlmc) {
      input_dtype = LlmcReader(input).dtype();
    } else {
      const SafetensorsReader reader(input);
      for (const std::string& name : reader.names()) {
        if (name.size() >= 10 && name.compare(name.size() - 10, 10, "wte.weight") == 0) {
          input_dtype = reader.info(name).dtype;
        }
      }
    }
    options.dtype = input_dtype;
    if (options.format == WeightFormat::kLlmc && input_dtype == StoredDType::kF16) {
      options.dtype = StoredDType::kF32;
    }
  }
  Gpt2WeightExporter exporter(output, config, options);
  std::vector<float> values;
  for (const Gpt2TensorRef& ref : gpt2_hf_mapping(config)) {
    values.resize(static_cast<size_t>(shape_numel(ref.shape)));
    source.fill(ref.param, ref.shape, values.data());
    exporter.add(ref.param, ref.shape, values.data());
  }
  exporter.commit();
  out << "wrote " << output << ": " << weight_format_name(options.format) << ", "
      << stored_dtype_name(options.dtype) << ", GPT-2 with " << models::describe(config) << ", "
      << gpt2_parameter_count(config) << " parameters\n";
}

std::string mib(uint64_t bytes) {
  std::ostringstream text;
  text << std::fixed << std::setprecision(2) << static_cast<double>(bytes) / (1 << 20) << " MiB";
  return text.str();
}

void export_weights(const std::string& input, const std::string& output,
                    const ConvertOptions& flags, std::ostream& out) {
  bool dtype_given = false;
  const Gpt2ExportOptions options = output_options(flags, output, &dtype_given);
  const ExportReport report = export_checkpoint(input, output, options);
  out << "wrote " << output << ": " << weight_format_name(options.format) << ", "
      << stored_dtype_name(options.dtype) << ", from checkpoint " << resolve_step_dir(input)
      << "\n";
  out << "memory: largest tensor buffer " << mib(report.largest_tensor_bytes)
      << ", process peak RSS " << mib(report.peak_rss_bytes) << " (" << mib(report.rss_before_bytes)
      << " before the export); model " << mib(report.model_bytes) << " (fp32)\n";
}

}  // namespace

int run_ckpt_tool(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  CLI::App app(
      "zs-ckpt: inspect and convert GPT-2 weight files (safetensors, llm.c) and sharded "
      "checkpoints",
      "zs-ckpt");
  app.require_subcommand(1);

  std::string inspect_path;
  int64_t inspect_heads = 0;
  CLI::App* inspect_command =
      app.add_subcommand("inspect", "format, tensors, GPT-2 config and parameter count of FILE");
  inspect_command
      ->add_option("FILE", inspect_path,
                   "a .safetensors or llm.c .bin file, or a checkpoint directory")
      ->required();
  inspect_command->add_option("--heads", inspect_heads,
                              "attention heads, when the file does not record them");

  std::string input, output;
  ConvertOptions flags;
  CLI::App* convert_command =
      app.add_subcommand("convert", "convert GPT-2 weights between safetensors and llm.c");
  convert_command->add_option("IN", input, "the weights to read")->required();
  convert_command->add_option("OUT", output, "the file to write (replaced atomically)")->required();
  convert_command->add_option("--to", flags.to,
                              "output format: safetensors or llmc "
                              "(default: from OUT's extension)");
  convert_command->add_option("--dtype", flags.dtype,
                              "output dtype: f32, f16 or bf16 (default: the input's)");
  convert_command->add_option("--heads", flags.heads,
                              "attention heads, when the input does not record them");
  convert_command->add_option("--padded-vocab", flags.padded_vocab,
                              "llm.c output: vocab padded to this (default: a multiple of 128)");

  std::string export_input, export_output;
  ConvertOptions export_flags;
  CLI::App* export_command = app.add_subcommand(
      "export", "consolidated GPT-2 weights of a sharded checkpoint, streamed tensor by tensor");
  export_command
      ->add_option("DIR", export_input,
                   "a step directory, or a checkpoint directory with a `latest` file")
      ->required();
  export_command->add_option("OUT", export_output, "the file to write (replaced atomically)")
      ->required();
  export_command->add_option("--to", export_flags.to,
                             "output format: safetensors or llmc "
                             "(default: from OUT's extension)");
  export_command->add_option("--dtype", export_flags.dtype, "output dtype: f32, f16 or bf16");
  export_command->add_option("--padded-vocab", export_flags.padded_vocab,
                             "llm.c output: vocab padded to this (default: a multiple of 128)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    // --help is a "parse error" whose exit code is 0.
    const int code = app.exit(error, out, err);
    return code == 0 ? 0 : kExitUsage;
  }
  try {
    if (*inspect_command && std::filesystem::is_directory(inspect_path)) {
      inspect_checkpoint(inspect_path, out);
    } else if (*inspect_command) {
      inspect(inspect_path, inspect_heads, out);
    } else if (*export_command) {
      export_weights(export_input, export_output, export_flags, out);
    } else {
      convert(input, output, flags, out);
    }
  } catch (const UsageError& error) {
    err << "zs-ckpt: " << error.message << "\n";
    return kExitUsage;
  } catch (const Error& error) {
    err << "zs-ckpt: " << user_message(error.what()) << "\n";
    return kExitFile;
  }
  return 0;
}

}  // namespace zs::checkpoint
