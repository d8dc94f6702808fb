// Compiled as C++11 with -pedantic -Wall -Wextra -Werror (make check-header).
#include "cosyvoice.h"

#include <memory>

struct EngineDeleter {
  void operator()(cosy_engine *e) const { cosy_engine_destroy(e); }
};

int main() {
  cosy_engine_config c;
  cosy_engine_config_init(&c, sizeof c);
  cosy_engine *raw = nullptr;
  if (cosy_engine_create(&c, &raw) == COSY_OK) {
    std::unique_ptr<cosy_engine, EngineDeleter> e(raw);
    return cosy_engine_sample_rate(e.get()) == 24000 ? 0 : 1;
  }
  cosy_chunk_fn fn = [](void *, const cosy_chunk *) -> int32_t { return 0; };
  (void)fn;
  return cosy_status_str(COSY_OK)[0] == 'o' ? 0 : 1;
}
