// Parsing and printing of Device values.
#include "runtime/device.h"

#include <cctype>

#include "runtime/error.h"

namespace zs {

Device Device::parse(const std::string& text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  const std::string prefix = "cuda:";
  if (text.compare(0, prefix.size(), prefix) == 0 && text.size() > prefix.size()) {
    std::string digits = text.substr(prefix.size());
    bool all_digits = digits.size() <= 4;
    for (char c : digits) all_digits = all_digits && std::isdigit(static_cast<unsigned char>(c));
    if (all_digits) return cuda(std::stoi(digits));
  }
  ZS_THROW(InvalidArgument, "unknown device '", text, "'; expected 'cpu', 'cuda' or 'cuda:N'");
}

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

}  // namespace zs
