#include "eval/roofline.h"

namespace megasched::eval {

Floor floor_for(const schedule::ModelShape& shape, const schedule::GpuTarget& target,
                int position) {
  Floor f;
  const uint64_t wbytes = static_cast<uint64_t>(schedule::dtype_bytes(shape.dtype));
  // The step reads every weight once except the embedding table, of which it reads one row (when
  // tied, the LM head reads the whole table anyway and the lookup row is read a second time).
  const uint64_t embed_table =
      static_cast<uint64_t>(shape.vocab) * static_cast<uint64_t>(shape.hidden) * wbytes;
  const uint64_t embed_row = static_cast<uint64_t>(shape.hidden) * wbytes;
  f.weight_bytes =
      static_cast<uint64_t>(shape.weight_bytes()) - (shape.tied_embeddings ? 0 : embed_table);
  const uint64_t per_pos = static_cast<uint64_t>(shape.kv_bytes_per_position());
  f.kv_read_bytes = per_pos * static_cast<uint64_t>(position + 1);
  f.write_bytes = per_pos + static_cast<uint64_t>(shape.vocab) * sizeof(float);
  f.bytes_min = f.weight_bytes + embed_row + f.kv_read_bytes + f.write_bytes;
  auto us = [&](double gbs) {
    return gbs > 0 ? static_cast<double>(f.bytes_min) / (gbs * 1e3) : 0.0;
  };
  f.floor_us = us(target.floor_bw_gbs());
  f.floor_datasheet_us = us(target.datasheet_bw_gbs);
  f.measured_bandwidth = target.measured_bw_gbs > 0;
  return f;
}

}  // namespace megasched::eval
