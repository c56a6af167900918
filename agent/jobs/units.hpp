// SPDX-License-Identifier: Apache-2.0
#pragma once
/// Numbers as people write them in the daemon config: counts, sizes ("512MiB") and durations
/// ("500ms", "30d"). Plain text in, a value or the reason it is not one out.

#include <cstdint>
#include <string>
#include <string_view>

namespace iolens::jobs {

/// A parsed value, or `error` (a phrase such as "expected a duration such as 500ms") when the
/// text is not one. The caller adds where it came from and the text itself.
struct ParsedUnsigned {
  uint64_t value = 0;
  std::string error;
  bool ok() const { return error.empty(); }
};

/// Decimal digits only: no sign, no spaces, no "0x", no digit separators.
ParsedUnsigned parse_unsigned(std::string_view text);

/// Bytes: plain digits, or digits and a unit: B; KB MB GB TB (powers of 1000); KiB MiB GiB TiB
/// (powers of 1024). Units are case-insensitive; one space may separate number and unit.
ParsedUnsigned parse_size_bytes(std::string_view text);

/// Milliseconds: digits and one unit of ms, s, m (minutes), h, d (lower case; one space may
/// separate them), or a bare "0". A bare non-zero number is refused: its unit would be a guess.
ParsedUnsigned parse_duration_ms(std::string_view text);

}  // namespace iolens::jobs
