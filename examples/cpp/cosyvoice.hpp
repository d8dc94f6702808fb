// cosyvoice.hpp - a small header-only C++17 RAII wrapper over the libcosyvoice C API.
//
//   cosy::engine eng("model.gguf");                    // COSY_DEVICE_CPU by default
//   cosy::voice v = cosy::voice::load(eng, "voice.gguf");
//   cosy::synth_params p; p.seed = 42;
//   std::vector<float> pcm = eng.synthesize(v, "Hello.", p);   // blocking
//   cosy::request r = eng.submit(v, "Hello.", p);              // pull streaming
//   for (std::vector<float> c; !(c = r.read(4800)).empty();) play(c);
//   cosy::request s = eng.submit(v, "Hi.", p, [](const cosy_chunk &c) { ...; return true; });
//   cosy::request t = eng.stream_text(v, p);                   // text streamed in
//   t.push_text("Hello, "); t.push_text("world."); t.end_text();  // (any one thread) ...
//   for (std::vector<float> c; !(c = t.read(4800)).empty();) play(c);  // ... audio as usual
//   for (const cosy::text_mark &m : t.text_marks()) ...;  // where each sentence can be heard
//
// - Handles are std::unique_ptr with deleters calling cosy_engine_destroy / cosy_voice_release /
//   cosy_request_release, so objects are move-only and free themselves.
// - Every failing call throws cosy::error, which carries the cosy_status and the message
//   "function: status text: cosy_last_error()" (read on the failing thread, right after the call).
// - Destroy voices and requests before their engine (the C API requires voices to be released
//   first); declaring the engine first in a scope does that.
// - A push callback (std::function<bool(const cosy_chunk&)>, return false to cancel) runs on an
//   engine thread. The request object owns the callable; its destructor cancels the request and
//   waits for its end before releasing, so the callable is never called after it is destroyed.
//   An exception escaping the callable cancels the request (it cannot cross the C boundary).
#ifndef COSYVOICE_HPP
#define COSYVOICE_HPP

#include <cosyvoice.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace cosy {

/// A failed libcosyvoice call: status() is the cosy_status, what() the full message.
class error : public std::runtime_error {
 public:
  error(cosy_status status, const std::string &message)
      : std::runtime_error(message), status_(status) {}
  cosy_status status() const noexcept { return status_; }

 private:
  cosy_status status_;
};

/// Throw cosy::error when st is not COSY_OK (call right after the failing function: the message
/// is thread-local).
inline void check(cosy_status st, const char *what) {
  if (st != COSY_OK)
    throw error(st, std::string(what) + ": " + cosy_status_str(st) + ": " + cosy_last_error());
}

struct engine_deleter {
  void operator()(cosy_engine *e) const noexcept { cosy_engine_destroy(e); }
};
struct voice_deleter {
  void operator()(cosy_voice *v) const noexcept { cosy_voice_release(v); }
};
struct request_deleter {
  void operator()(cosy_request *r) const noexcept { cosy_request_release(r); }
};
struct free_deleter {
  void operator()(void *p) const noexcept { cosy_free(p); }
};
using engine_ptr = std::unique_ptr<cosy_engine, engine_deleter>;
using voice_ptr = std::unique_ptr<cosy_voice, voice_deleter>;
using request_ptr = std::unique_ptr<cosy_request, request_deleter>;

/// The C structs, initialised by their *_init function (every field default).
struct engine_config : cosy_engine_config {
  engine_config() noexcept { cosy_engine_config_init(this, sizeof(cosy_engine_config)); }
};
struct synth_params : cosy_synth_params {
  synth_params() noexcept { cosy_synth_params_init(this, sizeof(cosy_synth_params)); }
};
struct voice_features : cosy_voice_features {
  voice_features() noexcept { cosy_voice_features_init(this, sizeof(cosy_voice_features)); }
};

/// One mark of cosy_request_text_marks: where the speech for a unit of a request's text (a
/// sentence; a word without text normalization) can start. [text_begin, text_end) are UTF-8 byte
/// offsets into the concatenation of every piece pushed; sample is the output sample of the first
/// speech token generated after the unit's text entered the LLM, a LOWER BOUND of where it is
/// heard (-1 while not fed yet, and for good when the request ended first); include/cosyvoice.h
/// says exactly what the fields mean.
struct text_mark {
  int64_t text_begin;
  int64_t text_end;
  int64_t sample;
  int32_t text_token;
  int32_t speech_token;
};

using chunk_fn = std::function<bool(const cosy_chunk &)>;

class engine;

/// A speaker (immutable; may be shared by many requests).
class voice {
 public:
  static voice load(engine &e, const std::string &path);
  static voice from_features(engine &e, const cosy_voice_features &f);
  /// Clone from a recording (cosy_voice_from_audio): mono samples in [-1, 1], 0.5..30 s at
  /// 16..192 kHz, and what is said in it. Save it to clone once and load it afterwards.
  static voice from_audio(engine &e, const std::vector<float> &pcm, int32_t sample_rate,
                          const std::string &transcript = "");
  void save(const std::string &path) const {
    check(cosy_voice_save(v_.get(), path.c_str()), "cosy_voice_save");
  }
  const cosy_voice *get() const noexcept { return v_.get(); }

 private:
  explicit voice(cosy_voice *v) noexcept : v_(v) {}
  voice_ptr v_;
};

/// One utterance in flight: pull it with read(), or let the callback receive it; wait() for
/// its end; cancel() from any thread.
class request {
 public:
  request(request &&) noexcept = default;
  request &operator=(request &&o) noexcept {
    if (this != &o) {
      finish();
      r_ = std::move(o.r_);
      fn_ = std::move(o.fn_);
    }
    return *this;
  }
  ~request() { finish(); }

  /// Up to cap samples; an empty vector means the utterance is finished. Throws on failure
  /// (COSY_ERR_CANCELLED after cancel()) and on COSY_ERR_TIMEOUT when timeout_ms >= 0 passes.
  std::vector<float> read(int64_t cap = 4800, int32_t timeout_ms = -1) {
    std::vector<float> buf(static_cast<size_t>(cap > 0 ? cap : 1));
    int64_t got = 0;
    check(cosy_request_read(r_.get(), buf.data(), static_cast<int64_t>(buf.size()), &got,
                            timeout_ms),
          "cosy_request_read");
    buf.resize(static_cast<size_t>(got));
    return buf;
  }
  /// Wait for the end (throws on failure, cancellation or timeout).
  void wait(int32_t timeout_ms = -1) { check(cosy_request_wait(r_.get(), timeout_ms), "cosy_request_wait"); }
  /// Any thread, any time, idempotent.
  void cancel() noexcept { cosy_request_cancel(r_.get()); }
  cosy_request_stats stats() const {
    cosy_request_stats s;
    cosy_request_stats_init(&s, sizeof s);
    check(cosy_request_get_stats(r_.get(), &s), "cosy_request_get_stats");
    return s;
  }
  /// Append a piece of the text of a stream_text request (cosy_request_push_text; UTF-8).
  void push_text(const std::string &utf8) {
    check(cosy_request_push_text(r_.get(), utf8.c_str()), "cosy_request_push_text");
  }
  /// The text of a stream_text request is complete (cosy_request_end_text).
  void end_text() { check(cosy_request_end_text(r_.get()), "cosy_request_end_text"); }
  /// The request's marks from index first on (cosy_request_text_marks), in text order: one per
  /// committed unit of its text. Units only get appended and a sample, once set (>= 0), never
  /// changes: poll this as the audio plays (any thread, also while another pushes or reads).
  std::vector<text_mark> text_marks(int32_t first = 0) const {
    std::vector<text_mark> out;
    cosy_text_mark buf[64];
    for (;;) {
      const int32_t at = first + static_cast<int32_t>(out.size());
      cosy_text_mark_init(&buf[0], sizeof buf[0]);  // out[0].struct_size is the stride
      int32_t n = 0;
      check(cosy_request_text_marks(r_.get(), at, buf, 64, &n), "cosy_request_text_marks");
      const int32_t got = n - at < 64 ? n - at : 64;
      for (int32_t i = 0; i < got; i++)
        out.push_back(text_mark{buf[i].text_begin, buf[i].text_end, buf[i].sample,
                                buf[i].text_token, buf[i].speech_token});
      if (got < 64) return out;  // (also got <= 0: first at or past the end)
    }
  }
  cosy_request *get() const noexcept { return r_.get(); }

 private:
  friend class engine;
  request(cosy_request *r, std::unique_ptr<chunk_fn> fn) noexcept : r_(r), fn_(std::move(fn)) {}
  void finish() noexcept {
    if (r_ && fn_) {  // make sure the callback is done with fn_ before it goes away
      cosy_request_cancel(r_.get());
      cosy_request_wait(r_.get(), -1);
    }
    r_.reset();
    fn_.reset();
  }
  request_ptr r_;
  std::unique_ptr<chunk_fn> fn_;  // stable address handed to the C callback
};

/// Weights, threads, scheduler. Thread-safe: share one engine between threads.
class engine {
 public:
  explicit engine(const engine_config &cfg) {
    cosy_engine *e = nullptr;
    check(cosy_engine_create(&cfg, &e), "cosy_engine_create");
    e_.reset(e);
  }
  explicit engine(const std::string &model_path, int32_t device = COSY_DEVICE_CPU,
                  int32_t cpu_threads = 0)
      : engine(make_config(model_path, device, cpu_threads)) {}

  int32_t sample_rate() const noexcept { return cosy_engine_sample_rate(e_.get()); }
  cosy_engine_stats stats() const {
    cosy_engine_stats s;
    cosy_engine_stats_init(&s, sizeof s);
    check(cosy_engine_get_stats(e_.get(), &s), "cosy_engine_get_stats");
    return s;
  }

  /// Blocking synthesis of a whole utterance (float samples in [-1, 1]).
  std::vector<float> synthesize(const voice &v, const std::string &text,
                                const cosy_synth_params &p = synth_params()) {
    float *pcm = nullptr;
    int64_t n = 0;
    check(cosy_synthesize(e_.get(), v.get(), text.c_str(), &p, &pcm, &n), "cosy_synthesize");
    std::unique_ptr<float, free_deleter> owned(pcm);
    return std::vector<float>(pcm, pcm + n);
  }

  /// Streaming: without fn pull the audio with request::read; with fn it is pushed to fn on an
  /// engine thread (return false from fn to cancel).
  request submit(const voice &v, const std::string &text,
                 const cosy_synth_params &p = synth_params(), chunk_fn fn = nullptr) {
    std::unique_ptr<chunk_fn> owned = fn ? std::make_unique<chunk_fn>(std::move(fn)) : nullptr;
    cosy_request *r = nullptr;
    check(cosy_request_submit(e_.get(), v.get(), text.c_str(), &p, owned ? &trampoline : nullptr,
                              owned.get(), &r),
          "cosy_request_submit");
    return request(r, std::move(owned));
  }

  /// Text streamed in (COSY_SYNTH_TEXT_STREAM): the request starts without text; give it with
  /// request::push_text (any number of pieces, e.g. a chat model's words as they come) and
  /// request::end_text, from any one thread, while the audio is pulled with request::read. The
  /// audio and the text marks depend only on the text, not on how it was cut into pieces.
  request stream_text(const voice &v, const cosy_synth_params &p = synth_params()) {
    cosy_synth_params q = p;
    q.flags |= COSY_SYNTH_TEXT_STREAM;
    cosy_request *r = nullptr;
    check(cosy_request_submit(e_.get(), v.get(), nullptr, &q, nullptr, nullptr, &r),
          "cosy_request_submit");
    return request(r, nullptr);
  }

  cosy_engine *get() const noexcept { return e_.get(); }

 private:
  static engine_config make_config(const std::string &path, int32_t device, int32_t threads) {
    engine_config c;
    c.model_path = path.c_str();  // copied by cosy_engine_create, which runs while path lives
    c.device = device;
    c.cpu_threads = threads;
    return c;
  }
  static int32_t trampoline(void *user, const cosy_chunk *c) noexcept {
    try {
      return (*static_cast<chunk_fn *>(user))(*c) ? 0 : 1;
    } catch (...) {
      return 1;  // an exception cannot cross into C: cancel the request instead
    }
  }
  engine_ptr e_;
};

inline voice voice::load(engine &e, const std::string &path) {
  cosy_voice *v = nullptr;
  check(cosy_voice_load(e.get(), path.c_str(), &v), "cosy_voice_load");
  return voice(v);
}

inline voice voice::from_features(engine &e, const cosy_voice_features &f) {
  cosy_voice *v = nullptr;
  check(cosy_voice_from_features(e.get(), &f, &v), "cosy_voice_from_features");
  return voice(v);
}

inline voice voice::from_audio(engine &e, const std::vector<float> &pcm, int32_t sample_rate,
                              const std::string &transcript) {
  cosy_voice *v = nullptr;
  check(cosy_voice_from_audio(e.get(), pcm.data(), static_cast<int64_t>(pcm.size()), sample_rate,
                              transcript.c_str(), &v),
        "cosy_voice_from_audio");
  return voice(v);
}

}  // namespace cosy

#endif  // COSYVOICE_HPP
