// example.cpp - the C++ RAII wrapper (cosyvoice.hpp) in use:
//
//   example MODEL.gguf VOICE.gguf ["Text to say."]
//
// 1. blocking synthesis; 2. the same seed pulled chunk by chunk (must be identical);
// 3. push streaming into a lambda, cancelled from the lambda after its first chunk;
// 4. an error: a missing voice file throws cosy::error with the status and the library's message.
// Exits non-zero when any of these does not behave as described.
//   c++ -std=c++17 -Wall -Werror example.cpp $(pkg-config --cflags --libs cosyvoice) -o example
#include "cosyvoice.hpp"

#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

int main(int argc, char **argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODEL.gguf VOICE.gguf [\"Text to say.\"]\n", argv[0]);
    return 2;
  }
  const std::string text = argc > 3 ? argv[3] : "Hello from C plus plus. Streaming is easy.";
  try {
    cosy::engine eng(argv[1]);  // declared first: destroyed last, after the voice and requests
    cosy::voice voice = cosy::voice::load(eng, argv[2]);

    cosy::synth_params p;
    p.seed = 7;
    p.max_tokens = 100;
    std::vector<float> blocking = eng.synthesize(voice, text, p);
    std::printf("blocking: %zu samples at %d Hz\n", blocking.size(), eng.sample_rate());

    std::vector<float> pulled;
    {
      cosy::request r = eng.submit(voice, text, p);
      int chunks = 0;
      for (std::vector<float> c; !(c = r.read(4800)).empty(); chunks++)
        pulled.insert(pulled.end(), c.begin(), c.end());
      cosy_request_stats s = r.stats();
      std::printf("pulled:   %zu samples in %d reads, ttfb %.3f s, %d speech tokens\n",
                  pulled.size(), chunks, s.ttfb_s, s.n_speech_tokens);
    }
    if (pulled != blocking) {
      std::fprintf(stderr, "pulled audio differs from blocking audio\n");
      return 1;
    }

    std::mutex mu;
    int pushed_chunks = 0;
    {
      cosy::request r = eng.submit(voice, text, p, [&](const cosy_chunk &c) {
        std::lock_guard<std::mutex> lock(mu);  // engine thread
        pushed_chunks++;
        std::printf("pushed chunk at offset %lld: %lld samples; cancelling\n",
                    static_cast<long long>(c.offset), static_cast<long long>(c.n_samples));
        return false;  // cancel after the first chunk
      });
      try {
        r.wait();
        std::fprintf(stderr, "the request was not cancelled\n");
        return 1;
      } catch (const cosy::error &e) {
        if (e.status() != COSY_ERR_CANCELLED) throw;
        std::printf("cancelled as asked: %s\n", e.what());
      }
    }
    if (pushed_chunks != 1) {
      std::fprintf(stderr, "expected 1 pushed chunk, got %d\n", pushed_chunks);
      return 1;
    }

    try {
      cosy::voice missing = cosy::voice::load(eng, "/nonexistent/voice.gguf");
      std::fprintf(stderr, "loading a missing voice did not throw\n");
      return 1;
    } catch (const cosy::error &e) {
      std::printf("error as expected (status %d): %s\n", e.status(), e.what());
      if (e.status() != COSY_ERR_IO) return 1;
    }
    std::printf("ok\n");
  } catch (const cosy::error &e) {
    std::fprintf(stderr, "cosy::error %d: %s\n", e.status(), e.what());
    return 1;
  }
  return 0;
}
