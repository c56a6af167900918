// SPDX-License-Identifier: Apache-2.0
#include "core/paths.hpp"

#include <vector>

namespace iolens::core {

std::string path_from_walk(std::string_view walk) {
  std::vector<std::string_view> parts;
  std::size_t pos = 0;
  while (pos < walk.size()) {
    std::size_t end = walk.find('\0', pos);
    if (end == std::string_view::npos) end = walk.size();
    if (end > pos) parts.push_back(walk.substr(pos, end - pos));
    pos = end + 1;
  }
  if (parts.empty()) return "/";
  std::string out;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
    out += '/';
    out += *it;
  }
  return out;
}

std::string lexical_normalize(std::string_view abs_path) {
  std::vector<std::string_view> parts;
  std::size_t pos = 0;
  while (pos <= abs_path.size()) {
    std::size_t end = abs_path.find('/', pos);
    if (end == std::string_view::npos) end = abs_path.size();
    std::string_view part = abs_path.substr(pos, end - pos);
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
    } else if (!part.empty() && part != ".") {
      parts.push_back(part);
    }
    pos = end + 1;
  }
  if (parts.empty()) return "/";
  std::string out;
  for (auto p : parts) {
    out += '/';
    out += p;
  }
  return out;
}

std::string resolve_argument(std::string_view base_walk, std::string_view arg) {
  if (!arg.empty() && arg.front() == '/') return lexical_normalize(arg);
  std::string joined = path_from_walk(base_walk);
  joined += '/';
  joined += arg;
  return lexical_normalize(joined);
}

std::string unknown_path(uint32_t kdev, uint64_t ino) {
  return "<unknown " + std::to_string(kernel_dev_major(kdev)) + ":" +
         std::to_string(kernel_dev_minor(kdev)) + ":" + std::to_string(ino) + ">";
}

uint32_t kernel_dev_major(uint32_t kdev) { return kdev >> 20; }
uint32_t kernel_dev_minor(uint32_t kdev) { return kdev & 0xfffff; }

uint64_t kernel_dev_to_user(uint32_t kdev) {
  const uint64_t major = kernel_dev_major(kdev);
  const uint64_t minor = kernel_dev_minor(kdev);
  return ((major & 0xfffff000ULL) << 32) | ((major & 0xfffULL) << 8) |
         ((minor & 0xffffff00ULL) << 12) | (minor & 0xffULL);
}

std::string unescape_mount_field(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto octal = [&](std::size_t k, char hi) { return s[k] >= '0' && s[k] <= hi; };
    if (s[i] == '\\' && i + 3 < s.size() && octal(i + 1, '3') && octal(i + 2, '7') &&
        octal(i + 3, '7')) {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace iolens::core
