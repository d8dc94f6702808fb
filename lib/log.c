/* log.c - engine_log: a message to the engine's log callback (cosy_engine_config.log_fn) at or
 * below its log level. At the bottom with util.c: the backends, the scheduler and the engine all
 * log through it. */
#include <stdarg.h>
#include <stdio.h>

#include "engine.h"
#include "util.h"

void engine_log(const cosy_engine *e, int level, const char *fmt, ...) {
  int max = e->cfg.log_level == 0 ? COSY_LOG_WARN : e->cfg.log_level;
  if (!e->cfg.log_fn || level > max) return;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  e->cfg.log_fn(e->cfg.log_user, level, msg);
}
