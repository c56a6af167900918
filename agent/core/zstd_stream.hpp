// SPDX-License-Identifier: Apache-2.0
#pragma once
/// zstd for files written as a stream of pieces (iolensd's job records) and read back whole:
/// one frame with its content checksum, made as the pieces come, so that the writer never holds
/// the whole text; and a reader that stops at a bound instead of inflating whatever it is given.

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace iolens::core {

/// Whether `head` (a file's first bytes) starts with the zstd frame magic (28 b5 2f fd).
bool is_zstd_frame(std::string_view head);

/// Compresses the pieces given to write() into one zstd frame (level `level`, content
/// checksum), handing the compressed bytes to `out` in pieces of up to ~128 KiB as they come.
class ZstdWriter {
 public:
  using Out = std::function<bool(std::string_view)>;
  ZstdWriter(Out out, int level);
  ~ZstdWriter();
  ZstdWriter(const ZstdWriter&) = delete;
  ZstdWriter& operator=(const ZstdWriter&) = delete;
  /// False, now and for every later call, once `out` failed or zstd did (a context it could
  /// not allocate, an error of its own).
  bool write(std::string_view piece);
  /// Ends the frame and hands over the rest. False as write().
  bool finish();

 private:
  bool pump(std::string_view in, bool end);
  struct Ctx;
  struct CtxFree {
    void operator()(Ctx* c) const;
  };
  std::unique_ptr<Ctx, CtxFree> ctx_;
  Out out_;
  std::string buf_;
  bool ok_ = true;
};

/// The content of `in`: one or more zstd frames, decompressed (each frame's checksum checked
/// when it has one). nullopt and `error` (what and at which input byte) when `in` is not zstd,
/// is cut or damaged, or would be more than `max_out` bytes (then `*over_bound`, when given, is
/// set: the one failure a caller answers differently).
std::optional<std::string> zstd_decompress(std::string_view in, std::size_t max_out,
                                           std::string& error, bool* over_bound = nullptr);

/// A record file's text whichever way it was written: `bytes` itself, or decompressed (up to
/// `max_out`, as zstd_decompress) when it starts with the zstd magic. The one rule every reader
/// of iolensd's records follows (record_compression: zstd or none).
std::optional<std::string> text_of_record(std::string bytes, std::size_t max_out,
                                          std::string& error, bool* over_bound = nullptr);

}  // namespace iolens::core
