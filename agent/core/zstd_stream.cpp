// SPDX-License-Identifier: Apache-2.0
#include "core/zstd_stream.hpp"

#include <zstd.h>

#include <cstring>

namespace iolens::core {

bool is_zstd_frame(std::string_view head) {
  return head.size() >= 4 && static_cast<unsigned char>(head[0]) == 0x28 &&
         static_cast<unsigned char>(head[1]) == 0xb5 && static_cast<unsigned char>(head[2]) == 0x2f &&
         static_cast<unsigned char>(head[3]) == 0xfd;
}

struct ZstdWriter::Ctx {
  ZSTD_CCtx* cctx = nullptr;
};

void ZstdWriter::CtxFree::operator()(Ctx* c) const {
  ZSTD_freeCCtx(c->cctx);  // accepts nullptr
  delete c;
}

ZstdWriter::ZstdWriter(Out out, int level) : ctx_(new Ctx), out_(std::move(out)) {
  ctx_->cctx = ZSTD_createCCtx();
  if (!ctx_->cctx || ZSTD_isError(ZSTD_CCtx_setParameter(ctx_->cctx, ZSTD_c_compressionLevel, level)) ||
      ZSTD_isError(ZSTD_CCtx_setParameter(ctx_->cctx, ZSTD_c_checksumFlag, 1)))
    ok_ = false;
  buf_.resize(ZSTD_CStreamOutSize());
}

ZstdWriter::~ZstdWriter() = default;

bool ZstdWriter::pump(std::string_view in, bool end) {
  if (!ok_) return false;
  ZSTD_inBuffer input{in.data(), in.size(), 0};
  for (;;) {
    ZSTD_outBuffer output{buf_.data(), buf_.size(), 0};
    const size_t left =
        ZSTD_compressStream2(ctx_->cctx, &output, &input, end ? ZSTD_e_end : ZSTD_e_continue);
    if (ZSTD_isError(left)) return ok_ = false;
    if (output.pos > 0 && !out_(std::string_view(buf_.data(), output.pos))) return ok_ = false;
    // continue: done once the input is consumed; end: once zstd says nothing is left to flush
    if (end ? left == 0 : input.pos == input.size) return true;
  }
}

bool ZstdWriter::write(std::string_view piece) { return pump(piece, false); }

bool ZstdWriter::finish() { return pump({}, true); }

std::optional<std::string> zstd_decompress(std::string_view in, std::size_t max_out,
                                           std::string& error, bool* over_bound) {
  if (over_bound) *over_bound = false;
  if (!is_zstd_frame(in)) {
    error = "not zstd data (no frame magic at byte 0)";
    return std::nullopt;
  }
  ZSTD_DCtx* d = ZSTD_createDCtx();
  if (!d) {
    error = "cannot allocate a zstd context";
    return std::nullopt;
  }
  std::string out;
  std::string chunk(ZSTD_DStreamOutSize(), '\0');
  ZSTD_inBuffer input{in.data(), in.size(), 0};
  const auto fail = [&](std::string why) {
    error = std::move(why);
    ZSTD_freeDCtx(d);
    return std::nullopt;
  };
  for (;;) {
    ZSTD_outBuffer output{chunk.data(), chunk.size(), 0};
    const size_t at = input.pos;
    const size_t left = ZSTD_decompressStream(d, &output, &input);
    if (ZSTD_isError(left))
      return fail("damaged zstd data near byte " + std::to_string(at) + ": " +
                  ZSTD_getErrorName(left));
    if (output.pos > max_out - out.size()) {
      if (over_bound) *over_bound = true;
      return fail("decompresses to more than " + std::to_string(max_out) + " bytes");
    }
    out.append(chunk.data(), output.pos);
    if (input.pos < input.size) continue;
    // All input read. 0: the last frame is decoded and flushed (a call after that would ask
    // for the next frame's header). Otherwise, with room left in the output, zstd has given
    // all it can of a frame whose end it has not seen: cut.
    if (left == 0) break;
    if (output.pos < output.size)
      return fail("cut: the last zstd frame ends early, at byte " + std::to_string(in.size()));
  }
  ZSTD_freeDCtx(d);
  return out;
}

std::optional<std::string> text_of_record(std::string bytes, std::size_t max_out,
                                          std::string& error, bool* over_bound) {
  if (over_bound) *over_bound = false;
  if (!is_zstd_frame(bytes)) return bytes;
  return zstd_decompress(bytes, max_out, error, over_bound);
}

}  // namespace iolens::core
