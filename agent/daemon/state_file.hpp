// SPDX-License-Identifier: Apache-2.0
#pragma once
/// The daemon's saved state file, state.cbor (docs/state-format.md#the-daemons-state-file):
/// "IOLSTAT2", the CBOR's length (u64, little-endian), then the CBOR compressed with zstd
/// ("IOLSTAT1": with zlib, as earlier builds wrote it, still read). The file is the daemon's
/// own, but read at every start of a root daemon: nothing in it may crash the daemon or make it
/// allocate more than the file can hold.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace iolens::daemon {

/// The longest CBOR a state file may claim: no node's state comes near it.
inline constexpr uint64_t kMaxStateRawBytes = uint64_t{4} << 30;

/// Where write_state puts the file's bytes, piece by piece; false: stop (a write failed).
using StateOut = std::function<bool(std::string_view)>;

/// `state` (the object Daemon::checkpoint builds) as the file's bytes, handed to `out` as they
/// are made: the header, then the CBOR compressed as the CBOR writer goes. Neither the whole CBOR
/// nor the whole compressed data is ever held: for a 50,000-record job they were ~180 MB at
/// once on the saver thread, on top of the state itself (bench/README.md "Memory: records kept
/// packed, the state written as it is encoded"). False, and `why` (when given) says what, if
/// zstd or `out` failed or the CBOR is over kMaxStateRawBytes (no start would read it): what was
/// handed over is then not a whole file. May throw what the JSON library throws (bad_alloc).
bool write_state(const nlohmann::json& state, const StateOut& out, std::string* why = nullptr);

/// The same bytes in memory (tests); nullopt if zstd fails.
std::optional<std::vector<uint8_t>> encode_state(const nlohmann::json& state);

/// Decodes and checks a state file: its magic; its claimed length against the file's size (zstd
/// cannot expand more than 32768:1, zlib 1032:1) and kMaxStateRawBytes; the data decompressed
/// as it goes, never past the claimed length, which it must fill exactly; the CBOR; and the type of every
/// top-level field the daemon reads (format 1, unsigned counters and positions, the table an
/// object, the pending keys binary, each job's loss base an array of the kernel's counters).
/// The table's own fields are JobTable::load's to check. Never throws: false and `error` say
/// what is wrong.
bool decode_state(std::string_view bytes, nlohmann::json& state, std::string& error);

}  // namespace iolens::daemon
