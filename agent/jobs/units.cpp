// SPDX-License-Identifier: Apache-2.0
#include "jobs/units.hpp"

#include <array>
#include <cctype>
#include <limits>

namespace iolens::jobs {
namespace {

struct Unit {
  std::string_view name;
  uint64_t factor;
};

constexpr uint64_t kKi = 1024;
constexpr std::array<Unit, 9> kSizeUnits{{{"b", 1},
                                          {"kb", 1000},
                                          {"mb", 1000 * 1000},
                                          {"gb", 1000 * 1000 * 1000},
                                          {"tb", 1000ull * 1000 * 1000 * 1000},
                                          {"kib", kKi},
                                          {"mib", kKi* kKi},
                                          {"gib", kKi* kKi* kKi},
                                          {"tib", kKi* kKi* kKi* kKi}}};

constexpr std::array<Unit, 5> kDurationUnits{
    {{"ms", 1}, {"s", 1000}, {"m", 60 * 1000}, {"h", 60 * 60 * 1000}, {"d", 24 * 60 * 60 * 1000}}};

// Splits "512 MiB" into "512" and "MiB": the leading digits, then the rest after at most one
// space. Either part may be empty.
std::pair<std::string_view, std::string_view> split_number(std::string_view text) {
  std::size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  std::string_view rest = text.substr(digits);
  if (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  return {text.substr(0, digits), rest};
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

ParsedUnsigned scaled(std::string_view digits, uint64_t factor, std::string_view too_large) {
  ParsedUnsigned n = parse_unsigned(digits);
  if (!n.ok()) return n;
  if (n.value > std::numeric_limits<uint64_t>::max() / factor) return {0, std::string(too_large)};
  return {n.value * factor, {}};
}

}  // namespace

ParsedUnsigned parse_unsigned(std::string_view text) {
  if (text.empty()) return {0, "expected digits"};
  uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return {0, "expected digits"};
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (value > (std::numeric_limits<uint64_t>::max() - digit) / 10) {
      return {0, "too large for 64 bits"};
    }
    value = value * 10 + digit;
  }
  return {value, {}};
}

ParsedUnsigned parse_size_bytes(std::string_view text) {
  static constexpr std::string_view kExpected =
      "expected a size in bytes, or a number and a unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)";
  const auto [digits, unit] = split_number(text);
  if (digits.empty()) return {0, std::string(kExpected)};
  if (unit.empty()) return scaled(digits, 1, "too large for 64 bits");
  const std::string unit_lower = lower(unit);
  for (const Unit& u : kSizeUnits) {
    if (u.name == unit_lower) return scaled(digits, u.factor, "too large for 64 bits");
  }
  return {0, std::string(kExpected)};
}

ParsedUnsigned parse_duration_ms(std::string_view text) {
  static constexpr std::string_view kExpected =
      "expected a duration: a number and a unit (ms, s, m, h, d), such as 500ms, 90s, 12h or 30d";
  const auto [digits, unit] = split_number(text);
  if (digits.empty()) return {0, std::string(kExpected)};
  if (unit.empty()) {
    ParsedUnsigned n = parse_unsigned(digits);
    if (n.ok() && n.value == 0) return n;  // zero needs no unit
    return {0, std::string(kExpected)};
  }
  for (const Unit& u : kDurationUnits) {
    if (u.name == unit) return scaled(digits, u.factor, "too long for 64 bits of milliseconds");
  }
  return {0, std::string(kExpected)};
}

}  // namespace iolens::jobs
